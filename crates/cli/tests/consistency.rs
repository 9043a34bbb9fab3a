//! Consistency levels against stale replicas, checked on recorded histories.
//!
//! Each test starts a 3-node cluster (replication 3, one worker per node) whose replicas are
//! kept stale: replica gossip only every 400 ms, one node cut off from replication in one
//! direction (it sends no gossip and starts no anti-entropy: its writes leave it only when
//! the others' anti-entropy pulls them, every 2 s), clients sending every request to a
//! random replica (so a session switches replicas all the time), and one node whose clock
//! runs 300 ms ahead (the timestamps it stamps beat later writes elsewhere). Concurrent sessions
//! run a randomized workload at one level while every operation is recorded (`checker`);
//! the level's checker must find zero violations. The same workload then runs at a weaker
//! level, and the checker must find at least one: every checker can fail.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use checker::{check, decode_value, encode_value, Event, Guarantee, History, Observed, Op, Span};
use client::{Client, ClientOptions, Level, Session, Value};
// Cluster tests run one at a time (`serial`: several clusters at once starve a 2-core
// machine).
use common::{eventually, serial, Native, NodeProc};
use testkit::rt;
use wire::pb::{self, request::Op as ReqOp, response::Result as R};

/// Slow gossip, fast failure detection off the critical path, 3 replicas per key.
const FLAGS: &[&str] = &[
    "--workers",
    "1",
    "--replication",
    "3",
    "--failure-timeout-ms",
    "5000",
    "--cluster-gossip-ms",
    "100",
    "--gossip-period-ms",
    "400",
    "--anti-entropy-ms",
    "2000",
];

struct Cluster {
    nodes: Vec<NodeProc>,
}

impl Cluster {
    fn start() -> Cluster {
        let mut skewed = FLAGS.to_vec();
        skewed.extend(["--clock-skew-ms", "300"]);
        let first = NodeProc::server("n1", None, &skewed);
        let seed = first.native;
        let mut nodes = vec![first];
        nodes.push(NodeProc::server("n2", Some(seed), FLAGS));
        // n3 is cut off from replication in one direction: it never gossips and never
        // starts anti-entropy, so its writes reach the others only when THEIR anti-entropy
        // (every 2 s) pulls them, while it still gets theirs by gossip.
        let cut_off: Vec<&str> = FLAGS
            .iter()
            .map(|f| match *f {
                "400" | "2000" => "600000",
                f => f,
            })
            .collect();
        nodes.push(NodeProc::server("n3", Some(seed), &cut_off));
        for node in &nodes {
            assert!(
                eventually(Duration::from_secs(20), || alive_members(node) == 3),
                "node {} did not see 3 members",
                node.native
            );
        }
        Cluster { nodes }
    }

    fn front(&self) -> String {
        self.nodes[0].native.to_string()
    }

    /// Every node's worker address (each holds every key: replication 3 on 3 nodes).
    fn replicas(&self) -> Vec<String> {
        self.nodes
            .iter()
            .flat_map(|n| n.workers.iter().map(|w| w.to_string()))
            .collect()
    }
}

fn alive_members(node: &NodeProc) -> usize {
    let mut c = Native::connect(node.native);
    match c.call(ReqOp::Topology(pb::GetTopology::default())).result {
        Some(R::Topology(t)) => t
            .members
            .iter()
            .filter(|m| m.role == "memory" && m.status == pb::NodeStatus::Alive as i32)
            .count(),
        _ => 0,
    }
}

/// What a read returned, as the checker sees it.
fn observed(value: Option<&Value>) -> Vec<Observed> {
    match value {
        None => Vec::new(),
        Some(Value::Lww(l)) => decode_value(&l.value)
            .map(|write| Observed {
                write,
                ts: Some((l.ts.time, l.ts.writer)),
            })
            .into_iter()
            .collect(),
        Some(Value::SingleKeyCausal(c)) => c
            .values()
            .filter_map(|v| decode_value(v))
            .map(|write| Observed { write, ts: None })
            .collect(),
        Some(Value::MultiKeyCausal(c)) => c
            .values()
            .filter_map(|v| decode_value(v))
            .map(|write| Observed { write, ts: None })
            .collect(),
        Some(other) => panic!("unexpected value {other:?}"),
    }
}

/// One step of a session's script.
#[derive(Clone, Debug)]
enum Step {
    Read(usize),
    Write(usize),
}

/// A transaction's (or, at the non-transactional levels, a group of plain operations')
/// steps, and whether it ends with an abort.
#[derive(Clone, Debug)]
struct Script {
    steps: Vec<Step>,
    /// Recorded as one transaction (ends with a commit or an abort).
    transaction: bool,
    abort: bool,
}

/// The workload's shape.
#[derive(Clone, Copy)]
enum Shape {
    /// Single operations: reads, writes, and read-then-write of the same key.
    Session,
    /// Transactions: read two keys, read the first again, write both (sometimes one twice),
    /// sometimes abort.
    Transactions,
}

const SESSIONS: usize = 6;
const KEYS: usize = 4;

/// Each session's scripts, from `seed`.
fn workload(shape: Shape, seed: u64) -> Vec<Vec<Script>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..SESSIONS)
        .map(|_| match shape {
            Shape::Session => (0..120)
                .map(|_| {
                    let k = rng.usize(..KEYS);
                    let steps = match rng.u8(..10) {
                        0..=3 => vec![Step::Read(k)],
                        4..=6 => vec![Step::Write(k)],
                        _ => vec![Step::Read(k), Step::Write(k)],
                    };
                    Script {
                        steps,
                        transaction: false,
                        abort: false,
                    }
                })
                .collect(),
            Shape::Transactions => (0..40)
                .map(|_| {
                    // Pairs from 3 keys: transactions often write the same key set.
                    let a = rng.usize(..3);
                    let b = (a + 1 + rng.usize(..2)) % 3;
                    let mut steps = vec![Step::Read(a), Step::Read(b), Step::Read(a)];
                    if rng.u8(..10) < 3 {
                        steps.push(Step::Write(a));
                    }
                    steps.extend([Step::Write(a), Step::Write(b)]);
                    Script {
                        steps,
                        transaction: true,
                        abort: rng.u8(..100) < 15,
                    }
                })
                .collect(),
        })
        .collect()
}

struct Run {
    history: History,
}

/// Runs `scripts` at `level` on fresh keys (prefixed `tag`) and records the history; then
/// waits for the replicas to converge (unless `settle` is false) and reads every key at
/// every replica as the final states.
async fn run(
    cluster: &Cluster,
    level: Level,
    scripts: &[Vec<Script>],
    tag: &str,
    settle: bool,
) -> Run {
    let options = ClientOptions {
        timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    };
    let client = Client::connect_with(&cluster.front(), options)
        .await
        .expect("connect");
    let keys: Vec<String> = (0..KEYS).map(|i| format!("{tag}/k{i}")).collect();
    let ids = Arc::new(Ids {
        write: AtomicU64::new(1),
        txn: AtomicU64::new(1),
        epoch: std::time::Instant::now(),
    });
    let tasks = scripts.iter().enumerate().map(|(s, scripts)| {
        let session = client.session(level);
        let keys = keys.clone();
        let ids = ids.clone();
        async move {
            let mut ops = Vec::new();
            for script in scripts {
                run_script(&session, s as u64, script, &keys, &ids, &mut ops).await;
                // A little spacing, so sessions interleave with gossip rounds.
                if fastrand::u8(..4) == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            ops
        }
    });
    let mut ops: Vec<Op> = Vec::new();
    for session_ops in join_all(tasks).await {
        ops.extend(session_ops);
    }
    let replicas = cluster.replicas();
    let read_finals = || async {
        let mut finals: Vec<BTreeMap<Vec<u8>, Vec<Observed>>> = Vec::new();
        for addr in &replicas {
            let mut map = BTreeMap::new();
            for key in &keys {
                let v = client.get_at(addr, key).await.expect("final read");
                map.insert(key.as_bytes().to_vec(), observed(v.as_ref()));
            }
            finals.push(map);
        }
        finals
    };
    let mut finals = read_finals().await;
    if settle {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while finals.windows(2).any(|w| w[0] != w[1]) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            finals = read_finals().await;
        }
    }
    Run {
        history: History { ops, finals },
    }
}

/// Numbering shared by a run's sessions: write ids, transaction ids, and the start that
/// op spans count from.
struct Ids {
    write: AtomicU64,
    txn: AtomicU64,
    epoch: std::time::Instant,
}

/// Runs one script for session `s`, appending its ops to `ops`.
async fn run_script(
    session: &Session,
    s: u64,
    script: &Script,
    keys: &[String],
    ids: &Ids,
    ops: &mut Vec<Op>,
) {
    let (next_write, next_txn, epoch) = (&ids.write, &ids.txn, ids.epoch);
    let level = session.level();
    let micros = || epoch.elapsed().as_micros() as u64;
    // At the non-transactional levels a "transaction" script is still recorded as one
    // transaction (the checker judges what the level failed to make atomic).
    let txn = script
        .transaction
        .then(|| next_txn.fetch_add(1, Ordering::Relaxed));
    let mut handle = if level.is_transactional() {
        Some(session.begin().expect("begin"))
    } else {
        None
    };
    for step in &script.steps {
        match *step {
            Step::Read(k) => {
                let invoked_us = micros();
                let v = match handle.as_mut() {
                    Some(t) => t.get(&keys[k]).await,
                    None => session.get(&keys[k]).await,
                }
                .unwrap_or_else(|e| panic!("read at {level}: {e}"));
                ops.push(Op {
                    session: s,
                    span: Some(Span {
                        invoked_us,
                        completed_us: micros(),
                    }),
                    txn,
                    event: Event::Read {
                        key: keys[k].as_bytes().to_vec(),
                        observed: observed(v.as_ref()),
                    },
                });
            }
            Step::Write(k) => {
                let id = checker::WriteId(next_write.fetch_add(1, Ordering::Relaxed));
                let bytes = encode_value(id);
                let invoked_us = micros();
                match handle.as_mut() {
                    Some(t) => t.write(&keys[k], &bytes).await,
                    None => session.write(&keys[k], &bytes).await,
                }
                .unwrap_or_else(|e| panic!("write at {level}: {e}"));
                ops.push(Op {
                    session: s,
                    span: Some(Span {
                        invoked_us,
                        completed_us: micros(),
                    }),
                    txn,
                    event: Event::Write {
                        key: keys[k].as_bytes().to_vec(),
                        write: id,
                        ts: None,
                    },
                });
            }
        }
    }
    let invoked_us = micros();
    if let Some(t) = handle.take() {
        if script.abort {
            t.abort();
        } else {
            t.commit()
                .await
                .unwrap_or_else(|e| panic!("commit at {level}: {e}"));
        }
    }
    if txn.is_some() {
        ops.push(Op {
            session: s,
            span: Some(Span {
                invoked_us,
                completed_us: micros(),
            }),
            txn,
            event: if script.abort {
                Event::Abort
            } else {
                Event::Commit
            },
        });
    }
}

/// Runs futures concurrently on the current task and collects their outputs in order.
async fn join_all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// Runs the same randomized workload at `level` and at `weaker`: `guarantee` must hold at
/// `level` (zero violations) and be violated at `weaker` (at least one), within a few
/// attempts with new seeds (staleness is a matter of timing).
fn level_holds_and_weaker_fails(
    level: Level,
    weaker: Level,
    guarantee: Guarantee,
    shape: Shape,
    settle_weaker: bool,
) {
    let _serial = serial();
    let cluster = Cluster::start();
    let rt = rt();
    let mut found = 0;
    for attempt in 0..5 {
        let seed = fastrand::u64(..);
        let scripts = workload(shape, seed);
        let strong = rt.block_on(run(
            &cluster,
            level,
            &scripts,
            &format!("{level}-{attempt}"),
            true,
        ));
        let report = check(guarantee, &strong.history);
        assert_eq!(
            report.count(),
            0,
            "{guarantee:?} violated at {level} (seed {seed}):\n{report}"
        );
        let weak = rt.block_on(run(
            &cluster,
            weaker,
            &scripts,
            &format!("{weaker}-{attempt}"),
            settle_weaker,
        ));
        let report = check(guarantee, &weak.history);
        eprintln!(
            "{guarantee:?}: 0 violations at {level}, {} at {weaker} (seed {seed}, {} ops)",
            report.count(),
            weak.history.ops.len()
        );
        found += report.count();
        if found > 0 {
            break;
        }
    }
    assert!(
        found > 0,
        "the {guarantee:?} checker found no violation at the weaker level {weaker} in 5 runs"
    );
}

#[test]
fn eventual_converges_and_unsettled_replicas_diverge() {
    // The weaker "level" is the same one read before gossip has run: replicas differ.
    level_holds_and_weaker_fails(
        Level::Eventual,
        Level::Eventual,
        Guarantee::Convergence,
        Shape::Session,
        false,
    );
}

#[test]
fn read_your_writes() {
    level_holds_and_weaker_fails(
        Level::ReadYourWrites,
        Level::Eventual,
        Guarantee::ReadYourWrites,
        Shape::Session,
        true,
    );
}

#[test]
fn monotonic_reads() {
    level_holds_and_weaker_fails(
        Level::MonotonicReads,
        Level::Eventual,
        Guarantee::MonotonicReads,
        Shape::Session,
        true,
    );
}

#[test]
fn monotonic_writes() {
    level_holds_and_weaker_fails(
        Level::MonotonicWrites,
        Level::Eventual,
        Guarantee::MonotonicWrites,
        Shape::Session,
        true,
    );
}

#[test]
fn writes_follow_reads() {
    level_holds_and_weaker_fails(
        Level::WritesFollowReads,
        Level::Eventual,
        Guarantee::WritesFollowReads,
        Shape::Session,
        true,
    );
}

#[test]
fn pram() {
    level_holds_and_weaker_fails(
        Level::Pram,
        Level::MonotonicReads,
        Guarantee::Pram,
        Shape::Session,
        true,
    );
}

#[test]
fn causal_per_key() {
    level_holds_and_weaker_fails(
        Level::Causal,
        Level::Eventual,
        Guarantee::CausalPerKey,
        Shape::Session,
        true,
    );
}

#[test]
fn causal_across_keys() {
    level_holds_and_weaker_fails(
        Level::MultiKeyCausal,
        Level::Causal,
        Guarantee::Causal,
        Shape::Session,
        true,
    );
}

#[test]
fn read_uncommitted() {
    level_holds_and_weaker_fails(
        Level::ReadUncommitted,
        Level::Eventual,
        Guarantee::ReadUncommitted,
        Shape::Transactions,
        true,
    );
}

#[test]
fn read_committed() {
    level_holds_and_weaker_fails(
        Level::ReadCommitted,
        Level::ReadUncommitted,
        Guarantee::ReadCommitted,
        Shape::Transactions,
        true,
    );
}

#[test]
fn item_cut_isolation() {
    level_holds_and_weaker_fails(
        Level::ItemCut,
        Level::ReadCommitted,
        Guarantee::ItemCut,
        Shape::Transactions,
        true,
    );
}

/// A session tracks at most `max_keys` keys: beyond it the least recently used are made
/// stable — merged into every replica — and forgotten, so reads of them at any replica are
/// still at least what the session wrote.
#[test]
fn bounded_session_state_makes_forgotten_keys_stable() {
    let _serial = serial();
    let cluster = Cluster::start();
    rt().block_on(async {
        let client = Client::connect(&cluster.front()).await.expect("connect");
        let options = client::SessionOptions { max_keys: 20 };
        let session = client.session_with(Level::ReadYourWrites, options);
        let keys: Vec<String> = (0..100).map(|i| format!("bounded/k{i:03}")).collect();
        for key in &keys {
            session.write(key, key.as_bytes()).await.expect("write");
        }
        assert!(
            session.tracked_keys() <= 20,
            "tracks {} keys, bound 20",
            session.tracked_keys()
        );
        // The first half was forgotten long ago: every worker, the cut-off one included,
        // holds those keys already (asked with `Holds`, which never looks elsewhere, unlike
        // a read that misses while the cluster's view settles).
        let first: Vec<bytes::Bytes> = keys[..50]
            .iter()
            .map(|k| bytes::Bytes::from(k.clone()))
            .collect();
        for node in &cluster.nodes {
            for worker in &node.workers {
                let mut c = Native::connect(*worker);
                let resp = c.call(ReqOp::Holds(pb::Holds {
                    keys: first.clone(),
                }));
                let Some(R::Multi(m)) = resp.result else {
                    panic!("{resp:?}")
                };
                let missing: Vec<&String> = m
                    .results
                    .iter()
                    .zip(&keys)
                    .filter(|(r, _)| {
                        !matches!(r.result, Some(pb::key_result::Result::Ack(ref a)) if a.count == 1)
                    })
                    .map(|(_, k)| k)
                    .collect();
                assert!(missing.is_empty(), "{worker} lacks {missing:?}");
            }
        }
        // And the session still reads its own writes of every key.
        for key in &keys {
            assert_eq!(
                session.read(key).await.expect("read"),
                vec![Box::from(key.as_bytes())]
            );
        }
    });
}

/// A read-committed commit is one batch that any node can take: when the node the client
/// connected to dies, the commit goes to another node's front port (retried until the
/// cluster has declared the dead node dead) and every write of it becomes readable.
#[test]
fn commit_survives_the_death_of_the_node_the_client_connected_to() {
    let _serial = serial();
    let mut cluster = Cluster::start();
    rt().block_on(async {
        let options = ClientOptions {
            timeout: Duration::from_secs(30),
            ..ClientOptions::default()
        };
        let client = Client::connect_with(&cluster.front(), options)
            .await
            .expect("connect");
        let session = client.session(Level::ReadCommitted);
        cluster.nodes[0].stop_with(libc::SIGKILL);
        let mut txn = session.begin().expect("begin");
        for i in 0..5 {
            txn.write(format!("survivor/k{i}"), format!("v{i}"))
                .await
                .expect("buffered write");
        }
        txn.commit().await.expect("commit through another node");
        // Read committed does not promise to read one's own writes: the commit was merged
        // on one replica of each key, and a read may reach another before gossip (or, from
        // n3, anti-entropy) brings it there. Every write must become readable.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        for i in 0..5 {
            let want = vec![Box::<[u8]>::from(format!("v{i}").as_bytes())];
            loop {
                let got = session.read(format!("survivor/k{i}")).await.expect("read");
                if got == want {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "survivor/k{i} still reads {got:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
}

/// While keys cannot be made stable (a replica is down and not yet declared dead), a
/// session over its bound refuses operations at twice the bound instead of growing, and
/// goes on once the cluster has dropped the dead replica.
#[test]
fn a_session_that_cannot_shed_keys_stops_growing() {
    let _serial = serial();
    let mut cluster = Cluster::start();
    rt().block_on(async {
        let client = Client::connect(&cluster.front()).await.expect("connect");
        let session = client.session_with(
            Level::ReadYourWrites,
            client::SessionOptions { max_keys: 5 },
        );
        cluster.nodes[1].stop_with(libc::SIGKILL);
        let mut full = None;
        for i in 0..100 {
            match session.write(format!("full/k{i}"), "v").await {
                Ok(()) => {}
                Err(e @ client::ClientError::SessionFull { .. }) => {
                    full = Some(e);
                    break;
                }
                Err(e) => panic!("write {i}: {e}"),
            }
        }
        assert!(full.is_some(), "the session never refused to grow");
        assert!(
            session.tracked_keys() <= 10,
            "{} keys",
            session.tracked_keys()
        );
        // Once n2 is declared dead (5 s), every replica left takes PutAll again.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match session.write("full/after", "v").await {
                Ok(()) => break,
                Err(client::ClientError::SessionFull { .. }) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "still full after 30 s"
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(session.tracked_keys() <= 10);
    });
}
