//! The backing store end to end: `latticekv local` in front of a real PostgreSQL
//! (testkit's throwaway server), as a user runs it — write-back reaching the table, an
//! outage taken without a failed write under every recovery technique, counters applied
//! exactly once, a crash in failed mode, the buffer bound, read-through of rows written by
//! SQL.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::http::{scrape, total, total_where};
use common::NodeProc;
use serde_json::Value;
use testkit::{eventually, PgServer};

/// The node's `status --json`.
fn status(node: &NodeProc) -> Value {
    serde_json::from_str(&node.cli_ok(&["status", "--json"])).expect("status JSON")
}

/// The node's backing-store mode ("normal", "failed", "recovery").
fn mode(node: &NodeProc) -> String {
    status(node)["backing"]["mode"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Rows of the table holding a value.
fn rows(pg: &PgServer) -> u64 {
    pg.try_psql("SELECT count(*) FROM latticekv_kv WHERE value IS NOT NULL")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn write_back_takes_writes_through_an_outage_and_drains_them_after() {
    let pg = PgServer::start();
    let url = pg.url();
    // The README's default (a memory node and a disk node) in front of the store.
    let node = NodeProc::start(&["--backing-store", &url, "--write-policy", "write-back"]);
    for i in 0..50 {
        node.cli_ok(&["put", &format!("k{i}"), &format!("v{i}")]);
    }
    assert!(
        eventually(Duration::from_secs(20), || rows(&pg) == 50),
        "write-back writes never reached the table: {} rows",
        rows(&pg)
    );
    assert_eq!(
        pg.psql("SELECT convert_from(value, 'UTF8') FROM latticekv_kv WHERE key = 'k7'::bytea")
            .trim(),
        "v7"
    );

    // The store goes down hard: every write keeps succeeding.
    pg.stop_immediate();
    for i in 50..100 {
        node.cli_ok(&["put", &format!("k{i}"), &format!("v{i}")]);
    }
    assert!(
        eventually(Duration::from_secs(20), || mode(&node) == "failed"),
        "never noticed the store was down: {}",
        status(&node)["backing"]
    );
    // Cached keys read; a key not in RAM is refused with a clear error.
    assert_eq!(node.cli_ok(&["get", "k60"]).trim(), "v60");
    let out = node.cli(&["get", "never-written"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("backing store is unavailable"),
        "{err}"
    );
    assert!(status(&node)["backing"]["failed_keys"].as_u64().unwrap() >= 50);
    // The metrics show the outage: failed mode, the buffered keys, the store's errors.
    let http = node.http.expect("local prints its HTTP address");
    let m = scrape(http);
    assert!(
        total_where(&m, "latticekv_backing_mode", &["mode=\"failed\""]) >= 1.0,
        "{m}"
    );
    assert!(total(&m, "latticekv_backing_failed_keys") >= 50.0, "{m}");
    assert!(total(&m, "latticekv_backing_dirty_keys") >= 50.0, "{m}");
    assert!(total(&m, "latticekv_backing_dirty_bytes") > 0.0, "{m}");
    assert!(
        total(&m, "latticekv_backing_apply_failures_total") >= 1.0,
        "{m}"
    );
    assert!(total(&m, "latticekv_backing_failures_total") >= 1.0, "{m}");
    let applied_in_outage = total(&m, "latticekv_backing_applied_keys_total");
    assert!(applied_in_outage >= 50.0, "{m}");

    // Back: the failed list drains, every acknowledged write is in the table.
    pg.start_again();
    assert!(
        eventually(Duration::from_secs(60), || mode(&node) == "normal"),
        "never recovered: {}",
        status(&node)["backing"]
    );
    assert!(
        eventually(Duration::from_secs(20), || rows(&pg) == 100),
        "{} of 100 acknowledged writes in the table",
        rows(&pg)
    );
    let b = &status(&node)["backing"];
    assert_eq!(b["dirty_keys"].as_u64(), Some(0), "{b}");
    // Back to normal in the metrics too; the drained keys were counted and timed.
    let m = scrape(http);
    assert_eq!(
        total_where(&m, "latticekv_backing_mode", &["mode=\"failed\""]),
        0.0,
        "{m}"
    );
    assert_eq!(total(&m, "latticekv_backing_dirty_keys"), 0.0, "{m}");
    assert!(
        total(&m, "latticekv_backing_applied_keys_total") >= applied_in_outage + 50.0,
        "{m}"
    );
    assert!(
        total(&m, "latticekv_backing_apply_duration_seconds_count") >= 2.0,
        "{m}"
    );
}

#[test]
fn reads_fill_from_rows_written_by_sql_and_writes_merge_with_them() {
    let pg = PgServer::start();
    let url = pg.url();
    let node = NodeProc::start(&["--disk-nodes", "0", "--backing-store", &url]);
    // The first write creates the table (write-through: answered once it is there).
    node.cli_ok(&["put", "first", "1"]);
    assert_eq!(rows(&pg), 1);
    pg.psql("INSERT INTO latticekv_kv (key, value) VALUES ('sql:1'::bytea, 'from sql'::bytea)");
    assert_eq!(node.cli_ok(&["get", "sql:1"]).trim(), "from sql");
    // A write through latticekv is newer than the SQL row: it wins, in RAM and in the row.
    node.cli_ok(&["put", "sql:1", "from latticekv"]);
    assert_eq!(
        pg.psql("SELECT convert_from(value, 'UTF8') FROM latticekv_kv WHERE key = 'sql:1'::bytea")
            .trim(),
        "from latticekv"
    );
    assert_eq!(node.cli_ok(&["get", "sql:1"]).trim(), "from latticekv");
}

/// A writer on its own thread: LWW keys `w{i}` and increments of counter `ctr`, one of
/// each per round, until stopped; counts what was acknowledged and what failed.
struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    failed: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(addr: std::net::SocketAddr) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(Mutex::new(Vec::new()));
        let (s, a, f) = (stop.clone(), acked.clone(), failed.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let c = client::Client::connect(&addr.to_string()).await.unwrap();
                let mut i = 0u64;
                while !s.load(Ordering::Relaxed) {
                    let w = c.assign(format!("w{i}"), format!("v{i}")).await;
                    let n = c.counter_add("ctr", 1).await;
                    match (w, n) {
                        (Ok(()), Ok(_)) => {
                            a.fetch_add(1, Ordering::Relaxed);
                        }
                        (w, n) => f.lock().unwrap().push(format!("round {i}: {w:?} {n:?}")),
                    }
                    i += 1;
                }
            });
        });
        Writer {
            stop,
            acked,
            failed,
            thread: Some(thread),
        }
    }

    fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    /// Waits until `n` more rounds were acknowledged.
    fn wait_for(&self, n: u64) {
        let target = self.acked() + n;
        assert!(
            eventually(Duration::from_secs(30), || self.acked() >= target),
            "the writer is stuck at {} rounds: {:?}",
            self.acked(),
            self.failed.lock().unwrap()
        );
    }

    /// Stops the writer; the rounds acknowledged.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        let failed = self.failed.lock().unwrap();
        assert!(failed.is_empty(), "writes failed: {failed:?}");
        self.acked()
    }
}

/// The counter `ctr` as a node that never saw it reads it through from `pg`.
fn counter_in_store(pg: &PgServer) -> i64 {
    let node = NodeProc::start(&["--disk-nodes", "0", "--backing-store", &pg.url()]);
    let out = node.cli_ok(&["get", "ctr"]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("ctr read through as {out:?}"))
}

#[test]
fn every_technique_takes_an_outage_under_load_and_drains_it_exactly_once() {
    for technique in ["tar", "dis", "tard", "tardis"] {
        let pg = PgServer::start();
        let url = pg.url();
        let node = NodeProc::start(&[
            "--disk-nodes",
            "0",
            "--backing-store",
            &url,
            "--write-policy",
            "write-back",
            "--recovery-technique",
            technique,
            "--recovery-workers",
            "2",
        ]);
        let writer = Writer::start(node.native);
        writer.wait_for(100);
        pg.stop_immediate();
        assert!(
            eventually(Duration::from_secs(20), || mode(&node) == "failed"),
            "{technique}: never noticed the outage"
        );
        writer.wait_for(200);
        pg.start_again();
        assert!(
            eventually(Duration::from_secs(60), || mode(&node) == "normal"),
            "{technique}: never recovered under load: {}",
            status(&node)["backing"]
        );
        writer.wait_for(50);
        let rounds = writer.stop();
        assert!(
            eventually(Duration::from_secs(30), || {
                status(&node)["backing"]["dirty_keys"].as_u64() == Some(0)
            }),
            "{technique}: dirty keys never drained: {}",
            status(&node)["backing"]
        );
        if rows(&pg) != rounds {
            let have = pg.psql("SELECT convert_from(key, 'UTF8') FROM latticekv_kv");
            let have: std::collections::HashSet<&str> = have.lines().map(str::trim).collect();
            let missing: Vec<u64> = (0..rounds)
                .filter(|i| !have.contains(format!("w{i}").as_str()))
                .collect();
            let first = missing.first().copied().unwrap_or(0);
            panic!(
                "{technique}: {} acknowledged writes missing from the table: {missing:?}; \
                 latticekv has w{first} = {:?}; {}",
                missing.len(),
                node.cli(&["get", &format!("w{first}")]),
                status(&node)["backing"]
            );
        }
        // Every increment counted once: a node that never saw the counter reads the
        // store's state.
        assert_eq!(counter_in_store(&pg), rounds as i64, "{technique}");
    }
}

#[test]
fn a_memory_node_killed_in_failed_mode_loses_no_acknowledged_write() {
    let pg = PgServer::start();
    let url = pg.url();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let flags = [
        "--data-dir",
        data,
        "--backing-store",
        &url,
        "--write-policy",
        "write-back",
        "--ack",
        "durable",
    ];
    let mut node = NodeProc::server("m1", None, &flags);
    node.cli_ok(&["put", "first", "0"]);
    node.cli_ok(&["put", "--type", "counter", "ctr", "1"]);
    assert!(eventually(Duration::from_secs(20), || rows(&pg) == 1));
    pg.stop_immediate();
    for i in 0..100 {
        node.cli_ok(&["put", &format!("k{i}"), &format!("v{i}")]);
    }
    // A cached counter takes increments (an uncached one would be refused: its total is
    // not known without the store).
    node.cli_ok(&["put", "--type", "counter", "ctr", "6"]);
    assert_eq!(mode(&node), "failed");
    node.stop_with(libc::SIGKILL);

    // Restarted from its log while the store is still down, then the store comes back:
    // every acknowledged write reaches the table.
    let node = NodeProc::server("m1", None, &flags);
    assert_eq!(node.cli_ok(&["get", "k42"]).trim(), "v42");
    pg.start_again();
    assert!(
        eventually(Duration::from_secs(60), || rows(&pg) == 101),
        "{} of 101 writes in the table after the crash: {}",
        rows(&pg),
        status(&node)["backing"]
    );
    assert_eq!(counter_in_store(&pg), 7);
}

#[test]
fn past_the_buffer_bound_writes_go_through_or_fail_clearly() {
    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("latticekv.toml");
    std::fs::write(
        &config,
        format!(
            "[backing]\nurl = \"{}\"\npolicy = \"write-back\"\nmax_buffered_bytes = 16384\n\
             apply_delay_ms = 600000\n",
            pg.url()
        ),
    )
    .unwrap();
    let node = NodeProc::start(&[
        "--disk-nodes",
        "0",
        "--workers",
        "1",
        "--config",
        config.to_str().unwrap(),
    ]);
    let value = "x".repeat(1000);
    // The store is up: beyond 16 KiB of dirty records, writes are applied at once.
    for i in 0..64 {
        node.cli_ok(&["put", &format!("up{i}"), &value]);
    }
    let b = status(&node)["backing"].clone();
    assert!(b["buffered_bytes"].as_u64().unwrap() <= 16384 + 2048, "{b}");
    assert!(rows(&pg) >= 40, "nothing went through: {} rows", rows(&pg));

    // The store is down: writes are buffered up to the bound, then refused clearly.
    pg.stop_immediate();
    let mut acked = Vec::new();
    let mut refused = 0;
    for i in 0..64 {
        let key = format!("down{i}");
        let out = node.cli(&["put", &key, &value]);
        if out.status.success() {
            acked.push(key);
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("write-back buffer is full"), "{err}");
            refused += 1;
        }
    }
    assert!(
        refused > 0 && !acked.is_empty(),
        "{} acked, {refused} refused",
        acked.len()
    );
    pg.start_again();
    assert!(
        eventually(Duration::from_secs(60), || {
            status(&node)["backing"]["dirty_keys"].as_u64() == Some(0)
        }),
        "{}",
        status(&node)["backing"]
    );
    for key in acked {
        let n = pg.psql(&format!(
            "SELECT count(*) FROM latticekv_kv WHERE key = '{key}'::bytea AND value IS NOT NULL"
        ));
        assert_eq!(n.trim(), "1", "acknowledged {key} is not in the table");
    }
}

#[test]
fn buffered_writes_survive_the_loss_of_a_memory_node() {
    let pg = PgServer::start();
    let url = pg.url();
    let flags = [
        "--replication",
        "2",
        "--ack-replicas",
        "2",
        "--backing-store",
        url.as_str(),
        "--write-policy",
        "write-back",
    ];
    let mut a = NodeProc::server("a", None, &flags);
    let b = NodeProc::server("b", Some(a.native), &flags);
    // Two acknowledgements: the write succeeds once the nodes see each other.
    assert!(
        eventually(Duration::from_secs(20), || b
            .cli(&["put", "first", "0"])
            .status
            .success()),
        "the nodes never saw each other: {:?}",
        b.cli(&["put", "first", "0"])
    );
    assert!(eventually(Duration::from_secs(20), || rows(&pg) == 1));
    pg.stop_immediate();
    // Each write is held by both nodes before it is acknowledged; about half of the keys
    // have node a as their primary, the one that applies them.
    for i in 0..50 {
        b.cli_ok(&["put", &format!("k{i}"), &format!("v{i}")]);
    }
    a.stop_with(libc::SIGKILL);
    pg.start_again();
    // Node b declares a dead, becomes the primary of a's keys and applies them too.
    assert!(
        eventually(Duration::from_secs(60), || rows(&pg) == 51),
        "{} of 51 acknowledged writes in the table after losing node a: {}",
        rows(&pg),
        status(&b)["backing"]
    );
}

#[test]
fn two_nodes_writing_the_same_keys_leave_the_row_at_the_value_they_agree_on() {
    let pg = PgServer::start();
    let url = pg.url();
    let flags = [
        "--replication",
        "2",
        "--backing-store",
        url.as_str(),
        "--write-policy",
        "write-back",
    ];
    let a = NodeProc::server("a", None, &flags);
    let b = NodeProc::server("b", Some(a.native), &flags);
    assert!(
        eventually(Duration::from_secs(20), || status(&a)["backing"]
            .is_object()
            && a.cli_ok(&["status"]).matches(" alive ").count() >= 2),
        "the nodes never saw each other: {}",
        a.cli_ok(&["status"])
    );
    // Both nodes take writes of the same keys at once (multi-master): each applies what
    // it is the primary of, merged with what gossip brings from the other.
    let keys: Vec<String> = (0..20).map(|i| format!("race{i}")).collect();
    std::thread::scope(|s| {
        for (node, tag) in [(&a, "a"), (&b, "b")] {
            let keys = &keys;
            s.spawn(move || {
                for round in 0..5 {
                    for k in keys {
                        node.cli_ok(&["put", k, &format!("{tag}{round}")]);
                    }
                }
            });
        }
    });
    // The replicas converge, and so does the table: each row holds the value both nodes
    // read (the write with the highest timestamp), whoever applied it last.
    for k in &keys {
        assert!(
            eventually(Duration::from_secs(30), || {
                let (va, vb) = (a.cli_ok(&["get", k]), b.cli_ok(&["get", k]));
                let row = pg.try_psql(&format!(
                    "SELECT convert_from(value, 'UTF8') FROM latticekv_kv WHERE key = '{k}'::bytea"
                ));
                va == vb && row.is_ok_and(|r| r.trim() == va.trim())
            }),
            "{k}: a={:?} b={:?} row={:?}",
            a.cli_ok(&["get", k]),
            b.cli_ok(&["get", k]),
            pg.try_psql(&format!(
                "SELECT convert_from(value, 'UTF8') FROM latticekv_kv WHERE key = '{k}'::bytea"
            ))
        );
    }
}
