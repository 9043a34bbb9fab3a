//! The PostgreSQL backing store against a real server (testkit's `PgServer`, one per test):
//! round trips of every lattice type, merge-on-apply (twice, reordered, concurrent), rows
//! written with plain SQL, the store going down and coming back, corrupt states, bad
//! configuration.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backing::{BackingError, BackingOptions, BackingStore, Postgres};
use bytes::Bytes;
use lattice::{Counter, Lattice, Lww, Max, Record, Set, Timestamp, Value};
use testkit::PgServer;

fn blob(s: &str) -> Box<[u8]> {
    s.as_bytes().into()
}

fn key(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// A hybrid-logical time of `ms` milliseconds.
fn at(ms: u64, writer: u64) -> Timestamp {
    Timestamp::new(ms << 16, writer)
}

fn lww(ms: u64, v: &str) -> Record {
    let t = at(ms, 1);
    Record::new(t, Some(Value::Lww(Lww::new(t, blob(v)))))
}

fn counter(actor: u64, total: u64) -> Record {
    Record::new(
        Timestamp::ZERO,
        Some(Value::Counter(Counter::from_entries([(actor, (total, 0))]))),
    )
}

fn set(members: &[&str]) -> Record {
    Record::new(
        Timestamp::ZERO,
        Some(Value::Set(
            members.iter().map(|m| blob(m)).collect::<Set<_>>(),
        )),
    )
}

async fn store(pg: &PgServer) -> Postgres {
    Postgres::connect(BackingOptions::new(pg.url()))
        .await
        .expect("connect")
}

async fn fetch_one(store: &Postgres, k: &str) -> Option<Record> {
    let mut rows = store.fetch(&[key(k)]).await.expect("fetch");
    rows.pop().expect("one row per key")
}

fn join(records: &[Record]) -> Record {
    let mut all = records.iter().cloned();
    let mut acc = all.next().expect("at least one record");
    for r in all {
        acc.merge(r);
    }
    acc
}

/// Every permutation of `0..n`.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, n - 1);
            out.push(q);
        }
    }
    out
}

#[tokio::test]
async fn every_type_round_trips_and_absent_keys_are_none() {
    let pg = PgServer::start();
    let store = store(&pg).await;
    let mut batch: Vec<(Bytes, Record)> = testkit::values::one_of_each()
        .into_iter()
        .map(|v| {
            let k = key(&format!("type-{}", v.lattice_type()));
            (k, Record::new(at(7, 2), Some(v)))
        })
        .collect();
    batch.push((key("tombstone"), Record::tombstone(at(9, 1))));
    assert_eq!(store.apply(&batch).await.unwrap(), batch.len());
    let mut keys: Vec<Bytes> = batch.iter().map(|(k, _)| k.clone()).collect();
    keys.insert(3, key("never-written"));
    let rows = store.fetch(&keys).await.unwrap();
    assert_eq!(rows.len(), keys.len());
    assert_eq!(rows[3], None);
    let fetched: Vec<Record> = rows
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(_, r)| r.expect("written"))
        .collect();
    let expected: Vec<Record> = batch.iter().map(|(_, r)| r.clone()).collect();
    assert_eq!(fetched, expected);
    // Everything is covered already: nothing changes, nothing is written.
    assert_eq!(store.apply(&batch).await.unwrap(), 0);
    assert_eq!(
        store.fetch(&[]).await.unwrap(),
        Vec::<Option<Record>>::new()
    );
    assert_eq!(store.apply(&[]).await.unwrap(), 0);
    store.ping().await.unwrap();
}

/// Each scenario's records, applied in every order (one key per order), and each applied
/// twice: every key ends with the records' join.
#[tokio::test]
async fn order_and_repetition_do_not_matter() {
    let pg = PgServer::start();
    let store = store(&pg).await;
    let tomb = Record::tombstone(at(6, 1));
    let scenarios: Vec<Vec<Record>> = vec![
        vec![lww(1, "a"), lww(3, "c"), lww(2, "b")],
        vec![lww(4, "new"), tomb.clone(), lww(5, "newest")],
        vec![set(&["a"]), set(&["b"]), tomb.clone()],
        vec![
            counter(1, 3),
            counter(2, 5),
            Record::new(
                Timestamp::ZERO,
                Some(Value::Counter(Counter::from_entries([(1, (4, 1))]))),
            ),
        ],
        vec![
            Record::new(at(1, 1), Some(Value::Max(Max(3)))),
            Record::new(at(1, 1), Some(Value::Max(Max(9)))),
            Record::new(at(1, 1), None),
        ],
    ];
    for (s, records) in scenarios.iter().enumerate() {
        let expected = join(records);
        for (p, order) in permutations(records.len()).into_iter().enumerate() {
            let k = key(&format!("s{s}-p{p}"));
            for &i in order.iter().chain(order.iter()) {
                store
                    .apply(&[(k.clone(), records[i].clone())])
                    .await
                    .unwrap();
            }
            assert_eq!(
                fetch_one(&store, &format!("s{s}-p{p}")).await.as_ref(),
                Some(&expected),
                "scenario {s}, order {order:?}"
            );
        }
        // All in one batch, repeated keys merged first.
        let k = format!("s{s}-batch");
        let batch: Vec<(Bytes, Record)> = records.iter().map(|r| (key(&k), r.clone())).collect();
        assert_eq!(store.apply(&batch).await.unwrap(), 1);
        assert_eq!(store.apply(&batch).await.unwrap(), 0);
        assert_eq!(fetch_one(&store, &k).await, Some(expected));
    }
}

/// Two replicas of a counter ship their growing states concurrently, in batches over
/// the same keys in different orders: every key ends with both replicas' totals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_counter_replicas_sum_exactly() {
    let pg = PgServer::start();
    let store = Arc::new(store(&pg).await);
    const KEYS: usize = 40;
    const ROUNDS: u64 = 15;
    let mut tasks = Vec::new();
    for replica in 1..=2u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for round in 1..=ROUNDS {
                let mut batch: Vec<(Bytes, Record)> = (0..KEYS)
                    .map(|i| (key(&format!("c{i}")), counter(replica, round)))
                    .collect();
                if replica == 2 {
                    batch.reverse();
                }
                store.apply(&batch).await.expect("apply never fails");
                // Shipping an older state again (a retried batch) changes nothing.
                let stale: Vec<(Bytes, Record)> = (0..KEYS)
                    .map(|i| (key(&format!("c{i}")), counter(replica, round / 2)))
                    .collect();
                store.apply(&stale).await.expect("apply never fails");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let keys: Vec<Bytes> = (0..KEYS).map(|i| key(&format!("c{i}"))).collect();
    for (i, row) in store.fetch(&keys).await.unwrap().into_iter().enumerate() {
        match row.and_then(|r| r.value) {
            Some(Value::Counter(c)) => assert_eq!(c.value(), 2 * ROUNDS as i128, "key c{i}"),
            other => panic!("key c{i}: {other:?}"),
        }
    }
}

/// Several appliers write overlapping key sets in different orders at once: none fails
/// (lock conflicts and deadlocks are retried inside), and every write is in the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appliers_on_overlapping_keys_lose_nothing() {
    let pg = PgServer::start();
    let store = Arc::new(store(&pg).await);
    const APPLIERS: usize = 4;
    const BATCHES: usize = 12;
    const KEYS: usize = 16;
    let mut tasks = Vec::new();
    for a in 0..APPLIERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for b in 0..BATCHES {
                // Overlapping windows of keys, rotated differently by each applier; new
                // keys appear as batches go on, so placeholder inserts race too.
                let batch: Vec<(Bytes, Record)> = (0..KEYS)
                    .map(|i| (i * (a + 1) + b) % (KEYS + b))
                    .map(|k| (key(&format!("k{k}")), set(&[&format!("a{a}b{b}")])))
                    .collect();
                store.apply(&batch).await.expect("apply never fails");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The expected members of every key, computed the same way.
    let mut expected: std::collections::BTreeMap<String, Vec<Record>> = Default::default();
    for a in 0..APPLIERS {
        for b in 0..BATCHES {
            for i in 0..KEYS {
                let k = (i * (a + 1) + b) % (KEYS + b);
                expected
                    .entry(format!("k{k}"))
                    .or_default()
                    .push(set(&[&format!("a{a}b{b}")]));
            }
        }
    }
    for (k, records) in expected {
        assert_eq!(fetch_one(&store, &k).await, Some(join(&records)), "key {k}");
    }
}

/// A real deadlock with another session, which the apply loses: the server aborts the
/// apply's transaction (40P01), and the apply runs it again and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_that_loses_a_deadlock_is_retried() {
    let pg = PgServer::start();
    let store = Arc::new(store(&pg).await);
    store
        .apply(&[(key("a"), lww(1, "a")), (key("b"), lww(1, "b"))])
        .await
        .unwrap();
    let (other, connection) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let conn = tokio::spawn(connection);
    // The other session detects deadlocks late, so the apply's backend is the one to.
    other
        .batch_execute(
            "SET deadlock_timeout = '20s'; BEGIN; \
             SELECT * FROM latticekv_kv WHERE key = 'b' FOR UPDATE",
        )
        .await
        .unwrap();
    let apply = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .apply(&[(key("a"), lww(2, "a2")), (key("b"), lww(2, "b2"))])
                .await
        }
    });
    // The apply holds 'a' and waits for 'b'.
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                   AND query LIKE '%FOR UPDATE%'";
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.psql(waiting) != "1" {
        assert!(
            Instant::now() < deadline,
            "the apply never waited for the lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Now the other session wants 'a': a cycle, found by the apply's backend.
    other
        .batch_execute("SELECT * FROM latticekv_kv WHERE key = 'a' FOR UPDATE")
        .await
        .expect("the other session wins the deadlock");
    other.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(apply.await.unwrap(), Ok(2), "the apply was retried");
    // The server counted the deadlock (its statistics are flushed lazily: poll).
    let deadlocks = "SELECT deadlocks FROM pg_stat_database WHERE datname = 'postgres'";
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.psql(deadlocks) != "1" {
        assert!(Instant::now() < deadline, "no deadlock counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fetch_one(&store, "b").await, Some(lww(2, "b2")));
    drop(other);
    conn.await.unwrap().unwrap();
}

#[tokio::test]
async fn rows_written_with_sql_read_as_lww_and_merge() {
    let pg = PgServer::start();
    let store = store(&pg).await;
    store.ping().await.unwrap(); // creates the table
                                 // No ts: the oldest timestamp, any write replaces it.
    pg.psql("INSERT INTO latticekv_kv (key, value) VALUES ('plain', 'from sql')");
    let old = fetch_one(&store, "plain").await.unwrap();
    let t0 = Timestamp::ZERO;
    assert_eq!(
        old,
        Record::new(t0, Some(Value::Lww(Lww::new(t0, blob("from sql")))))
    );
    assert_eq!(
        store
            .apply(&[(key("plain"), lww(1, "mine"))])
            .await
            .unwrap(),
        1
    );
    assert_eq!(fetch_one(&store, "plain").await, Some(lww(1, "mine")));
    // With a ts: older writes do not overwrite it, newer ones do.
    pg.psql(&format!(
        "INSERT INTO latticekv_kv (key, value, ts) VALUES ('stamped', 'sql', {})",
        100u64 << 16
    ));
    assert_eq!(
        store
            .apply(&[(key("stamped"), lww(99, "older"))])
            .await
            .unwrap(),
        0
    );
    let sql_row = fetch_one(&store, "stamped").await.unwrap();
    assert_eq!(sql_row.epoch, Timestamp::new(100 << 16, 0));
    assert_eq!(
        sql_row.value,
        Some(Value::Lww(Lww::new(sql_row.epoch, blob("sql"))))
    );
    assert_eq!(
        pg.psql(
            "SELECT convert_from(value, 'UTF8'), state IS NULL FROM latticekv_kv \
             WHERE key = 'stamped'"
        ),
        "sql|t"
    );
    assert_eq!(
        store
            .apply(&[(key("stamped"), lww(101, "newer"))])
            .await
            .unwrap(),
        1
    );
    assert_eq!(fetch_one(&store, "stamped").await, Some(lww(101, "newer")));
    // A row with neither value nor state is no record.
    pg.psql("INSERT INTO latticekv_kv (key) VALUES ('empty')");
    assert_eq!(fetch_one(&store, "empty").await, None);
}

#[tokio::test]
async fn value_column_holds_lww_bytes_for_sql_readers() {
    let pg = PgServer::start();
    let store = store(&pg).await;
    let batch = [
        (key("greeting"), lww(10, "hello")),
        (key("count"), counter(1, 5)),
    ];
    store.apply(&batch).await.unwrap();
    assert_eq!(
        pg.psql(
            "SELECT convert_from(value, 'UTF8'), ts, state IS NOT NULL, updated_at <= now() \
             FROM latticekv_kv WHERE key = 'greeting'"
        ),
        format!("hello|{}|t|t", 10u64 << 16)
    );
    // Other types have no plain value; ts is the record's epoch.
    assert_eq!(
        pg.psql(
            "SELECT value IS NULL, ts, state IS NOT NULL FROM latticekv_kv WHERE key = 'count'"
        ),
        "t|0|t"
    );
    // A delete: value NULL, ts the delete's time, the tombstone kept in state.
    store
        .apply(&[(key("greeting"), Record::tombstone(at(11, 1)))])
        .await
        .unwrap();
    assert_eq!(
        pg.psql("SELECT value IS NULL, ts FROM latticekv_kv WHERE key = 'greeting'"),
        format!("t|{}", 11u64 << 16)
    );
    assert_eq!(
        fetch_one(&store, "greeting").await,
        Some(Record::tombstone(at(11, 1)))
    );
    // The delete wins over the older write arriving late.
    assert_eq!(
        store
            .apply(&[(key("greeting"), lww(10, "hello"))])
            .await
            .unwrap(),
        0
    );
}

/// Asserts that `result` is Unavailable and came within `bound`.
fn assert_unavailable<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, BackingError>,
    started: Instant,
    bound: Duration,
) {
    let took = started.elapsed();
    match result {
        Err(e) if e.is_unavailable() => {}
        other => panic!("{what}: expected Unavailable, got {other:?}"),
    }
    assert!(took <= bound, "{what} took {took:?}, bound {bound:?}");
}

#[tokio::test]
async fn store_down_is_unavailable_in_bounded_time_and_recovers() {
    let pg = PgServer::start();
    let mut options = BackingOptions::new(pg.url());
    options.connect_timeout = Duration::from_secs(1);
    options.statement_timeout = Duration::from_secs(2);
    let bound = Duration::from_secs(3) + Duration::from_millis(500);

    // Used while up: the pool holds connections when the store goes down.
    let store = Postgres::connect(options.clone()).await.unwrap();
    store
        .apply(&[(key("before"), lww(1, "kept"))])
        .await
        .unwrap();
    pg.stop_immediate();
    // Connecting while the store is down succeeds (nothing is contacted).
    let fresh = Postgres::connect(options)
        .await
        .expect("connect while down");
    for s in [&store, &fresh] {
        let t = Instant::now();
        assert_unavailable("apply", s.apply(&[(key("k"), lww(2, "v"))]).await, t, bound);
        let t = Instant::now();
        assert_unavailable("fetch", s.fetch(&[key("before")]).await, t, bound);
        let t = Instant::now();
        assert_unavailable("ping", s.ping().await, t, bound);
    }
    pg.start_again();
    // Both work again without anything done by the caller: dead pooled connections are
    // replaced, and the fresh store creates nothing (the table exists).
    for s in [&store, &fresh] {
        s.ping().await.expect("ping after restart");
        assert_eq!(fetch_one(s, "before").await, Some(lww(1, "kept")));
    }
    store.apply(&[(key("after"), lww(3, "x"))]).await.unwrap();
    assert_eq!(fetch_one(&fresh, "after").await, Some(lww(3, "x")));
    // Once more, with connections in the pool of both.
    pg.stop_immediate();
    pg.start_again();
    assert_eq!(
        fresh.apply(&[(key("after"), lww(4, "y"))]).await.unwrap(),
        1
    );
    assert_eq!(fetch_one(&store, "after").await, Some(lww(4, "y")));
}

/// A row held locked by another session past the statement timeout: the apply gives up
/// with Unavailable within its bound, and succeeds once the lock is gone.
#[tokio::test]
async fn a_slow_store_is_unavailable_within_the_bound() {
    let pg = PgServer::start();
    let mut options = BackingOptions::new(pg.url());
    options.statement_timeout = Duration::from_millis(500);
    let store = Postgres::connect(options).await.unwrap();
    store.apply(&[(key("hot"), lww(1, "a"))]).await.unwrap();

    let (client, connection) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let conn = tokio::spawn(connection);
    client
        .batch_execute("BEGIN; SELECT * FROM latticekv_kv WHERE key = 'hot' FOR UPDATE")
        .await
        .unwrap();
    let t = Instant::now();
    let result = store.apply(&[(key("hot"), lww(2, "b"))]).await;
    assert_unavailable("apply on a locked row", result, t, Duration::from_secs(3));
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(store.apply(&[(key("hot"), lww(2, "b"))]).await.unwrap(), 1);
    drop(client);
    conn.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_corrupt_state_is_corrupt_not_a_panic() {
    let pg = PgServer::start();
    let store = store(&pg).await;
    let batch = [(key("bad"), lww(1, "a")), (key("good"), lww(1, "b"))];
    store.apply(&batch).await.unwrap();
    pg.psql("UPDATE latticekv_kv SET state = '\\xdeadbeef' WHERE key = 'bad'");
    let is_corrupt = |r: Result<(), BackingError>| match r {
        Err(BackingError::Corrupt { key, .. }) => key == "bad",
        _ => false,
    };
    assert!(is_corrupt(
        store.fetch(&[key("good"), key("bad")]).await.map(|_| ())
    ));
    assert!(is_corrupt(
        store.apply(&[(key("bad"), lww(2, "c"))]).await.map(|_| ())
    ));
    // The batch touching it was not applied at all, and the store still works.
    assert!(is_corrupt(
        store
            .apply(&[(key("good"), lww(3, "z")), (key("bad"), lww(3, "z"))])
            .await
            .map(|_| ())
    ));
    assert_eq!(fetch_one(&store, "good").await, Some(lww(1, "b")));
    // Empty state bytes are a valid protobuf message without an epoch: corrupt too.
    pg.psql("UPDATE latticekv_kv SET state = '' WHERE key = 'bad'");
    assert!(is_corrupt(store.fetch(&[key("bad")]).await.map(|_| ())));
}

#[tokio::test]
async fn a_key_the_store_refuses_rejects_the_whole_batch() {
    let pg = PgServer::start();
    let store = store(&pg).await;
    // Incompressible and far above the B-tree index's row limit (~2.7 KB).
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let huge: Vec<u8> = (0..10_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let batch = [(key("fine"), lww(1, "a")), (Bytes::from(huge), lww(1, "b"))];
    match store.apply(&batch).await {
        Err(BackingError::Rejected(m)) => assert!(m.contains("54000"), "{m}"),
        other => panic!("expected Rejected, got {other:?}"),
    }
    assert_eq!(fetch_one(&store, "fine").await, None, "partly applied");
    assert_eq!(store.apply(&batch[..1]).await.unwrap(), 1);
}

#[tokio::test]
async fn bad_configuration_is_config() {
    let pg = PgServer::start();
    let is_config = |r: Result<(), BackingError>| matches!(r, Err(BackingError::Config(_)));
    let mut bad_table = BackingOptions::new(pg.url());
    bad_table.table = "kv; DROP TABLE x".into();
    assert!(is_config(Postgres::connect(bad_table).await.map(|_| ())));
    let bad_url = BackingOptions::new("postgresql://postgres@[::1/postgres");
    assert!(is_config(Postgres::connect(bad_url).await.map(|_| ())));

    // A table of the wrong shape is found at the first connection.
    pg.psql(
        "CREATE TABLE wrong_type (key bytea PRIMARY KEY, value bytea, state bytea, \
         ts text, updated_at timestamptz)",
    );
    pg.psql("CREATE TABLE no_state (key bytea PRIMARY KEY, value bytea, ts bigint)");
    pg.psql(
        "CREATE TABLE no_key (key bytea, value bytea, state bytea, ts bigint NOT NULL \
         DEFAULT 0, updated_at timestamptz)",
    );
    for table in ["wrong_type", "no_state", "no_key"] {
        let mut options = BackingOptions::new(pg.url());
        options.table = table.into();
        let store = Postgres::connect(options).await.unwrap();
        match store.ping().await {
            Err(BackingError::Config(m)) => eprintln!("{table}: {m}"),
            other => panic!("{table}: expected Config, got {other:?}"),
        }
    }
    // A schema that does not exist, and a database that does not exist.
    let mut options = BackingOptions::new(pg.url());
    options.table = "nowhere.kv".into();
    let store = Postgres::connect(options).await.unwrap();
    assert!(is_config(store.ping().await));
    let url = pg.url().replace("/postgres", "/nodb");
    let store = Postgres::connect(BackingOptions::new(url)).await.unwrap();
    assert!(is_config(store.ping().await));
}

#[tokio::test]
async fn a_schema_qualified_table_is_created_and_used() {
    let pg = PgServer::start();
    pg.psql("CREATE SCHEMA app");
    let mut options = BackingOptions::new(pg.url());
    options.table = "app.kv".into();
    let store = Postgres::connect(options).await.unwrap();
    store.apply(&[(key("k"), lww(1, "v"))]).await.unwrap();
    assert_eq!(
        pg.psql("SELECT convert_from(value, 'UTF8') FROM app.kv"),
        "v"
    );
    assert_eq!(pg.psql("SELECT to_regclass('latticekv_kv') IS NULL"), "t");
    assert_eq!(fetch_one(&store, "k").await, Some(lww(1, "v")));
}
