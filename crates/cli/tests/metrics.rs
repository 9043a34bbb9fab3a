//! The HTTP port of `latticekv local` (on by default): `/metrics` in the Prometheus text
//! format moves under load — counters grow, the latency histogram fills, the write-ahead
//! log's bytes and fsyncs grow, the embedded monitor's rounds are counted — and `/health`
//! answers; anything else is refused without harming the node.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::http::{http, scrape, total, total_where};
use common::{eventually, NodeProc, Resp};

#[test]
fn metrics_move_under_load_and_health_answers() {
    // The embedded monitor on a short period, so that its rounds show within the test.
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "period_ms = 200\n").unwrap();
    let node = NodeProc::start(&[
        "--workers",
        "2",
        "--monitor-config",
        policy.to_str().unwrap(),
    ]);
    let addr = node.http.expect("local prints its HTTP address");
    assert!(addr.ip().is_loopback(), "{addr}");

    let (status, body) = http(addr, "GET", "/health");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, before) = http(addr, "GET", "/metrics");
    assert_eq!(status, 200);
    assert!(before.contains("# TYPE latticekv_request_duration_seconds histogram"));
    let ops_before = total(&before, "latticekv_operations_total");
    // `local` keeps a write-ahead log per worker in its data directory.
    let wal_bytes_before = total(&before, "latticekv_wal_appended_bytes_total");
    let fsyncs_before = total(&before, "latticekv_wal_fsyncs_total");
    let fsync_count_before = total(&before, "latticekv_wal_fsync_duration_seconds_count");
    let count_before = total(&before, "latticekv_request_duration_seconds_count");

    let mut r = Resp::connect(node.resp);
    for i in 0..500 {
        let key = format!("k{i}");
        r.roundtrip(&[b"SET", key.as_bytes(), b"v"], b"+OK\r\n");
    }
    // Writes are acknowledged once merged; the log's writer thread catches up behind them
    // and fsyncs within its period (`periodic`, 100 ms). Wait for both (the written bytes
    // reach the appended ones, an fsync is counted) before reading the counters.
    let caught_up = |m: &str| {
        total(m, "latticekv_wal_written_bytes_total")
            >= total(m, "latticekv_wal_appended_bytes_total")
            && total(m, "latticekv_wal_fsyncs_total") > fsyncs_before
    };
    // The assertions below read that same scrape: the node keeps appending (the monitor,
    // at a 200 ms period, may replicate the new keys to the other worker, whose log takes
    // them), so a later scrape may find its writer behind again.
    let mut after = String::new();
    assert!(
        eventually(Duration::from_secs(20), || {
            after = http(addr, "GET", "/metrics").1;
            caught_up(&after)
        }),
        "the log's writer never wrote and fsynced the appended records"
    );
    let ops = total(&after, "latticekv_operations_total") - ops_before;
    assert!(ops >= 500.0, "operations_total grew by {ops}");
    let count = total(&after, "latticekv_request_duration_seconds_count") - count_before;
    assert!(
        count >= 500.0,
        "the histogram counted {count} more requests"
    );
    let inf = after
        .lines()
        .find(|l| l.starts_with("latticekv_request_duration_seconds_bucket") && l.contains("+Inf"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap();
    let finite: Vec<f64> = after
        .lines()
        .filter(|l| {
            l.starts_with("latticekv_request_duration_seconds_bucket") && !l.contains("+Inf")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(finite.windows(2).all(|w| w[0] <= w[1]), "{finite:?}");
    assert!(
        finite.last().copied().unwrap_or(0.0) > 0.0,
        "no request in any bucket"
    );
    assert!(inf >= *finite.last().unwrap());
    assert!(total(&after, "latticekv_keys") >= 500.0);

    // The log took the writes: bytes appended and written, fsyncs counted and timed.
    let wal_bytes = total(&after, "latticekv_wal_appended_bytes_total") - wal_bytes_before;
    assert!(
        wal_bytes >= 500.0 * 3.0,
        "the log grew by {wal_bytes} bytes"
    );
    assert!(
        total(&after, "latticekv_wal_appended_records_total") > 0.0
            && total(&after, "latticekv_wal_written_bytes_total") >= wal_bytes
    );
    let fsyncs = total(&after, "latticekv_wal_fsyncs_total") - fsyncs_before;
    assert!(fsyncs >= 1.0, "{fsyncs} fsyncs");
    let fsync_count =
        total(&after, "latticekv_wal_fsync_duration_seconds_count") - fsync_count_before;
    assert_eq!(
        fsync_count, fsyncs,
        "the fsync histogram counts every fsync"
    );
    assert!(total(&after, "latticekv_wal_fsync_duration_seconds_sum") > 0.0);
    assert_eq!(total(&after, "latticekv_wal_failed"), 0.0);
    assert!(after.contains("# TYPE latticekv_wal_snapshot_duration_seconds summary"));
    // No backing store: no write-back families.
    assert!(!after.contains("latticekv_backing_"), "{after}");

    // The embedded monitor reports its rounds to the node, which exports them.
    let mut rounds = 0.0;
    assert!(
        eventually(Duration::from_secs(20), || {
            rounds = total(&scrape(addr), "latticekv_policy_rounds_total");
            rounds >= 2.0
        }),
        "the monitor's rounds never showed: {rounds}"
    );
    let policy = scrape(addr);
    assert_eq!(total(&policy, "latticekv_policy_dry_run"), 0.0);
    assert!(total(&policy, "latticekv_policy_latency_objective_seconds") > 0.0);
    assert!(policy.contains("# TYPE latticekv_policy_actions_total counter"));
    let kinds = policy
        .lines()
        .filter(|l| l.starts_with("latticekv_policy_actions_total{"))
        .count();
    assert_eq!(kinds, 4, "one series per action kind");
    // One node, no cluster manager: nothing was added or removed.
    assert_eq!(
        total_where(
            &policy,
            "latticekv_policy_actions_total",
            &["kind=\"remove_node\""]
        ),
        0.0
    );
    assert_eq!(total(&policy, "latticekv_policy_nodes_removed_total"), 0.0);
    assert_eq!(
        total(&after, "latticekv_cluster_members"),
        2.0,
        "memory + disk node"
    );

    // Refused, and the node keeps serving.
    assert_eq!(http(addr, "GET", "/nope").0, 404);
    assert_eq!(http(addr, "POST", "/metrics").0, 405);
    let mut junk = TcpStream::connect(addr).unwrap();
    junk.write_all(b"\x00\x01garbage\r\n\r\n").unwrap();
    let mut sink = Vec::new();
    let _ = junk.read_to_end(&mut sink);
    assert_eq!(http(addr, "GET", "/health").0, 200);
    r.roundtrip(&[b"GET", b"k1"], b"$1\r\nv\r\n");
}

/// A write acknowledged at the durable level is fsynced before its answer whatever the
/// policy: under `periodic:3600s` the writer would not fsync on its own within the test, so
/// every answer must have asked for (and waited for) an fsync of its own batch.
#[test]
fn a_durable_write_waits_for_an_fsync_under_a_periodic_policy() {
    let node = NodeProc::start(&[
        "--workers",
        "1",
        "--fsync",
        "periodic:3600s",
        "--ack",
        "durable",
    ]);
    let addr = node.http.expect("local prints its HTTP address");
    let fsyncs = || total(&scrape(addr), "latticekv_wal_fsyncs_total");
    let before = fsyncs();
    let mut r = Resp::connect(node.resp);
    for i in 0..20 {
        let key = format!("d{i}");
        r.roundtrip(&[b"SET", key.as_bytes(), b"v"], b"+OK\r\n");
        // Answered, so its batch was fsynced: one fsync per unpipelined write at least.
        let done = fsyncs() - before;
        assert!(
            done >= f64::from(i + 1),
            "write {i} answered after only {done} fsyncs"
        );
    }
}

/// Requests and error replies are counted by protocol and command, exactly: direct replies
/// and replies that waited for another worker (a pipeline over two workers) alike, RESP and
/// native, unknown commands under `other`.
#[test]
fn requests_and_errors_are_counted_by_protocol_and_command() {
    use wire::pb::{self, request::Op};

    let node = NodeProc::start(&["--workers", "2", "--disk-nodes", "0"]);
    let addr = node.http.expect("local prints its HTTP address");
    let count = |m: &str, name: &str, protocol: &str, command: &str| {
        let labels = [
            format!("protocol=\"{protocol}\""),
            format!("command=\"{command}\""),
        ];
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        total_where(m, name, &labels)
    };
    let before = scrape(addr);
    let grew = |after: &str, name: &str, protocol: &str, command: &str| {
        count(after, name, protocol, command) - count(&before, name, protocol, command)
    };

    // RESP, one at a time: 300 SETs, 200 GETs, 50 LPUSHes on strings (WRONGTYPE), 10
    // unknown commands.
    let mut r = Resp::connect(node.resp);
    for i in 0..300 {
        let key = format!("k{i}");
        r.roundtrip(&[b"SET", key.as_bytes(), b"v"], b"+OK\r\n");
    }
    for i in 0..200 {
        let key = format!("k{i}");
        r.roundtrip(&[b"GET", key.as_bytes()], b"$1\r\nv\r\n");
    }
    for i in 0..50 {
        let key = format!("k{i}");
        r.send(&[b"LPUSH", key.as_bytes(), b"x"]);
        assert!(r.line().starts_with("-WRONGTYPE"));
    }
    for _ in 0..10 {
        r.send(&[b"NOSUCHCOMMAND", b"a"]);
        assert!(r.line().starts_with("-ERR unknown command"));
    }
    // Pipelined: 40 SETs and 40 failing LPUSHes interleaved, over keys of both workers,
    // so some replies wait in the queue behind others.
    let mut pipeline = Vec::new();
    for i in 0..40 {
        for args in [
            vec![b"SET".to_vec(), format!("p{i}").into_bytes(), b"v".to_vec()],
            vec![
                b"LPUSH".to_vec(),
                format!("k{i}").into_bytes(),
                b"x".to_vec(),
            ],
        ] {
            pipeline.extend(format!("*{}\r\n", args.len()).into_bytes());
            for a in args {
                pipeline.extend(format!("${}\r\n", a.len()).into_bytes());
                pipeline.extend(a);
                pipeline.extend(b"\r\n");
            }
        }
    }
    let mut replies = Resp::connect(node.resp);
    replies.stream.write_all(&pipeline).unwrap();
    for _ in 0..40 {
        assert_eq!(replies.line(), "+OK\r\n");
        assert!(replies.line().starts_with("-WRONGTYPE"));
    }

    // Native: 30 puts and a bad one (no value), 20 gets.
    let mut n = common::Native::connect(node.native);
    for i in 0..30 {
        let resp = n.call(Op::Put(pb::Put {
            key: format!("n{i}").into(),
            value: Some(wire::convert::value_to_pb(&common::cluster::value(i))),
        }));
        assert!(!matches!(resp.result, Some(pb::response::Result::Error(_))));
    }
    let bad = n.call(Op::Put(pb::Put {
        key: "n0".into(),
        value: None,
    }));
    assert!(matches!(bad.result, Some(pb::response::Result::Error(_))));
    for i in 0..20 {
        n.call(Op::Get(pb::Get {
            key: format!("n{i}").into(),
        }));
    }

    let after = scrape(addr);
    let req = "latticekv_requests_total";
    let err = "latticekv_request_errors_total";
    assert!(after.contains("# TYPE latticekv_requests_total counter"));
    assert_eq!(grew(&after, req, "resp", "set"), 340.0);
    assert_eq!(grew(&after, err, "resp", "set"), 0.0);
    assert_eq!(grew(&after, req, "resp", "get"), 200.0);
    assert_eq!(grew(&after, err, "resp", "get"), 0.0);
    assert_eq!(grew(&after, req, "resp", "lpush"), 90.0);
    assert_eq!(grew(&after, err, "resp", "lpush"), 90.0);
    assert_eq!(grew(&after, req, "resp", "other"), 10.0);
    assert_eq!(grew(&after, err, "resp", "other"), 10.0);
    assert_eq!(grew(&after, req, "native", "put"), 31.0);
    assert_eq!(grew(&after, err, "native", "put"), 1.0);
    assert_eq!(grew(&after, req, "native", "get"), 20.0);
    assert_eq!(grew(&after, err, "native", "get"), 0.0);
    // The command label takes only known names: the unknown one is not a series of its own.
    assert!(!after.to_lowercase().contains("nosuchcommand"));
}
