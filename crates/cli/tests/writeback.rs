//! The backing store end to end: `latticekv local` in front of a real PostgreSQL
//! (testkit's throwaway server), as a user runs it — write-back reaching the table, an
//! outage taken without a failed write, read-through of rows written by SQL.

mod common;

use std::time::Duration;

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
    let node = NodeProc::start(&[
        "--disk-nodes",
        "0",
        "--backing-store",
        &url,
        "--write-policy",
        "write-back",
    ]);
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
