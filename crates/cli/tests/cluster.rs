//! Multi-process clusters of real `latticekv server` processes on 127.0.0.1: a node killed
//! with SIGKILL, a node joining under load, a node leaving gracefully.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use client::routing::Layout;
use client::Client;
// Cluster tests run one at a time (`serial`): several clusters at once on a 2-core machine
// starve the agents' heartbeats and make nodes suspect each other, which tests something else.
use common::cluster::{alive_members, holders, replica_counts, rt, topology};
use common::{eventually, serial, Native, NodeProc};
use lattice::{Lww, Timestamp, Value};
use wire::pb::{self, request::Op, response::Result as R};

/// Fast failure detection and anti-entropy for tests.
const CLUSTER_FLAGS: &[&str] = &[
    "--workers",
    "2",
    "--failure-timeout-ms",
    "2000",
    "--cluster-gossip-ms",
    "100",
    "--anti-entropy-ms",
    "2000",
];

/// Replication 3, with data gossip and anti-entropy pushed out of a test's time frame:
/// replicas share only what the requests themselves carry to them. A worker's first round
/// of each comes at a random time within its period (so workers don't gossip in step): with
/// six workers and a period of ten minutes, one in several runs of a few seconds saw a first
/// round, so the periods are a day. Failure detection is slow too: a node suspected on a
/// loaded machine changes the ring, and the anti-entropy that follows every ring change
/// would spread keys these tests expect on one replica.
const WITHOUT_GOSSIP: &[&str] = &[
    "--workers",
    "2",
    "--failure-timeout-ms",
    "10000",
    "--cluster-gossip-ms",
    "100",
    "--replication",
    "3",
    "--gossip-period-ms",
    "86400000",
    "--anti-entropy-ms",
    "86400000",
];

fn flags(replication: &str) -> Vec<&str> {
    let mut f = CLUSTER_FLAGS.to_vec();
    f.extend(["--replication", replication]);
    f
}

fn cluster(n: usize, replication: &str) -> Vec<NodeProc> {
    cluster_with(n, &flags(replication))
}

/// As [`cluster`], with the given server flags.
fn cluster_with(n: usize, f: &[&str]) -> Vec<NodeProc> {
    let first = NodeProc::server("n1", None, f);
    let seed = first.native;
    let mut nodes = vec![first];
    for i in 2..=n {
        nodes.push(NodeProc::server(&format!("n{i}"), Some(seed), f));
    }
    for node in &nodes {
        assert!(
            eventually(Duration::from_secs(20), || alive_members(node) == n),
            "node {} did not see {n} members",
            node.native
        );
    }
    nodes
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("key:{i:06}")).collect()
}

fn value(i: usize) -> Value {
    let ts = Timestamp::new(((i as u64) + 1) << 16, 77);
    Value::Lww(Lww::new(ts, format!("value-{i}").into_bytes().into()))
}

fn expected_owners(node: &NodeProc, keys: &[String]) -> HashMap<String, BTreeSet<String>> {
    let layout = Layout::from_topology(&topology(node.native));
    let mut out: HashMap<String, BTreeSet<String>> = HashMap::new();
    for k in keys {
        for r in layout.replicas(k.as_bytes()) {
            let addr = layout.addr(r).unwrap().to_string();
            out.entry(addr).or_default().insert(k.clone());
        }
    }
    out
}

fn write_all(front: std::net::SocketAddr, keys: &[String]) {
    rt().block_on(async {
        let c = Client::connect(&front.to_string()).await.unwrap();
        for chunk in keys.chunks(500).enumerate() {
            let (n, chunk) = chunk;
            let items: Vec<(String, Value)> = chunk
                .iter()
                .enumerate()
                .map(|(i, k)| (k.clone(), value(n * 500 + i)))
                .collect();
            c.put_many(&items).await.unwrap();
        }
    });
}

fn read_all(front: std::net::SocketAddr, keys: &[String]) -> Vec<Option<Value>> {
    rt().block_on(async {
        let c = Client::connect(&front.to_string()).await.unwrap();
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(500) {
            out.extend(c.get_many(chunk).await.unwrap());
        }
        out
    })
}

/// Replication 3 across 4 nodes takes 10,000 writes; one node is killed with SIGKILL.
/// Every key stays readable, and once the failure timeout passes the survivors restore
/// every key to 3 replicas. (With 3 nodes, 3 replicas need a replacement node to join —
/// the join test covers that path.)
#[test]
fn a_killed_node_loses_no_key_and_its_keys_are_re_replicated() {
    let _serial = serial();
    let mut nodes = cluster(4, "3");
    let keys = keys(10_000);
    write_all(nodes[0].native, &keys);
    // Gossip to all replicas first (acknowledged after one replica, spread by gossip).
    let all: Vec<&NodeProc> = nodes.iter().collect();
    assert!(
        eventually(Duration::from_secs(20), || replica_counts(&all, &keys)
            .values()
            .all(|&c| c == 3)),
        "not every key reached 3 replicas"
    );

    let mut victim = nodes.remove(3);
    let _ = victim.child.kill();
    let _ = victim.child.wait();

    // Every key is still readable right away (reads move to other replicas).
    let values = read_all(nodes[0].native, &keys);
    for (i, v) in values.iter().enumerate() {
        assert_eq!(v.as_ref(), Some(&value(i)), "key {i} after the kill");
    }
    // After the failure timeout, the dead node's keys are re-replicated on the survivors.
    let survivors: Vec<&NodeProc> = nodes.iter().collect();
    assert!(
        eventually(Duration::from_secs(30), || {
            let counts = replica_counts(&survivors, &keys);
            counts.values().all(|&c| c == 3)
        }),
        "keys not back to 3 replicas: {:?}",
        {
            let counts = replica_counts(&survivors, &keys);
            let mut hist: HashMap<usize, usize> = HashMap::new();
            for c in counts.values() {
                *hist.entry(*c).or_default() += 1;
            }
            hist
        }
    );
    for node in &nodes {
        assert!(
            eventually(Duration::from_secs(10), || alive_members(node) == 3),
            "{} sees {:?}",
            node.native,
            topology(node.native)
                .members
                .iter()
                .map(|m| (m.node_id.clone(), m.status, m.incarnation))
                .collect::<Vec<_>>()
        );
    }
}

/// A fourth node joins while clients read existing keys: no read returns not-found, the
/// moved keys end on the new node, and afterwards the holders of every key are exactly the
/// owners computed from scratch from the final membership.
#[test]
fn a_node_joins_under_load() {
    let _serial = serial();
    let mut nodes = cluster(3, "2");
    let keys = Arc::new(keys(3_000));
    write_all(nodes[0].native, &keys);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let misses = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (keys, stop, reads, misses) =
                (keys.clone(), stop.clone(), reads.clone(), misses.clone());
            let front = nodes[t].native;
            std::thread::spawn(move || {
                rt().block_on(async {
                    let c = Client::connect(&front.to_string()).await.unwrap();
                    let mut i = t;
                    while !stop.load(Ordering::Relaxed) {
                        let k = &keys[i % keys.len()];
                        match c.get(k).await {
                            Ok(Some(_)) => {}
                            Ok(None) => {
                                misses.fetch_add(1, Ordering::Relaxed);
                                eprintln!("not found during the join: {k}");
                            }
                            Err(e) => panic!("read of {k} failed: {e}"),
                        }
                        reads.fetch_add(1, Ordering::Relaxed);
                        i += 7;
                    }
                })
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let seed = nodes[0].native;
    nodes.push(NodeProc::server("n4", Some(seed), &flags("2")));
    let all: Vec<&NodeProc> = nodes.iter().collect();
    // Wait until the placement settles: every key held exactly where the final view says.
    let settled = eventually(Duration::from_secs(30), || {
        all.iter().all(|n| alive_members(n) == 4)
            && holders(&all, &keys) == {
                let mut expected = expected_owners(&nodes[0], &keys);
                for node in &all {
                    for w in &node.workers {
                        expected.entry(w.to_string()).or_default();
                    }
                }
                expected
            }
    });
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(
        settled,
        "the owner map did not match the one computed from scratch"
    );
    assert_eq!(
        misses.load(Ordering::Relaxed),
        0,
        "reads returned not-found during the join"
    );
    assert!(reads.load(Ordering::Relaxed) > 100, "the readers ran");
    // The new node holds its share.
    let on_new: usize = holders(&[&nodes[3]], &keys)
        .values()
        .map(BTreeSet::len)
        .sum();
    assert!(on_new > 800, "{on_new} keys moved to the new node");
    // And every key still has its value.
    let values = read_all(nodes[3].native, &keys);
    for (i, v) in values.iter().enumerate() {
        assert_eq!(v.as_ref(), Some(&value(i)));
    }
}

/// A node asked to leave hands its keys to the others, then exits; nothing is lost.
#[test]
fn a_leaving_node_hands_off_its_keys() {
    let _serial = serial();
    let mut nodes = cluster(3, "1");
    let keys = keys(2_000);
    write_all(nodes[0].native, &keys);
    let leaving = nodes.remove(2);
    let held: usize = holders(&[&leaving], &keys)
        .values()
        .map(BTreeSet::len)
        .sum();
    assert!(held > 300, "the leaving node held {held} keys");
    let out = leaving.cli(&["leave", "--addr", &leaving.native.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut leaving = leaving;
    assert!(
        eventually(Duration::from_secs(15), || matches!(
            leaving.child.try_wait(),
            Ok(Some(_))
        )),
        "the node did not exit after leaving"
    );
    let rest: Vec<&NodeProc> = nodes.iter().collect();
    let counts = replica_counts(&rest, &keys);
    assert!(
        counts.values().all(|&c| c == 1),
        "every key on exactly one remaining node"
    );
    let values = read_all(nodes[0].native, &keys);
    for (i, v) in values.iter().enumerate() {
        assert_eq!(v.as_ref(), Some(&value(i)));
    }
    for n in &nodes {
        let t = topology(n.native);
        assert!(t
            .members
            .iter()
            .any(|m| m.node_id == "n3" && m.status == pb::NodeStatus::Left as i32));
    }
}

/// With replica gossip and anti-entropy slowed to minutes, a write acknowledged with
/// `ack_replicas = 3` is already on all three replicas when the answer arrives, while a
/// default write is on one; asking for more acknowledgements than replicas is an error.
#[test]
fn synchronous_fan_out_acknowledges_after_n_replicas() {
    let _serial = serial();
    // Only the synchronous fan-out can put a key on more than one node.
    let nodes = cluster_with(3, WITHOUT_GOSSIP);
    let all: Vec<&NodeProc> = nodes.iter().collect();
    // Every ring change starts an anti-entropy pass 500 ms later (paced, so it can run on
    // for a while on a loaded machine); one still running when the default writes below
    // land would repair them to the other replicas. The pass over an empty store is short:
    // let it finish before anything is written (nothing observable says it has; a status
    // counter of anti-entropy sessions would make this an await).
    std::thread::sleep(Duration::from_secs(2));
    let acked_keys = keys(200);
    let front = nodes[0].native.to_string();
    rt().block_on(async {
        let options = client::ClientOptions {
            ack_replicas: 3,
            ..Default::default()
        };
        let c = Client::connect_with(&front, options).await.unwrap();
        for (i, k) in acked_keys.iter().enumerate() {
            c.put(k, value(i)).await.unwrap();
        }
        // A batch goes through the same path.
        let items: Vec<(String, Value)> =
            (0..50).map(|i| (format!("batch:{i}"), value(i))).collect();
        c.put_many(&items).await.unwrap();

        let too_many = client::ClientOptions {
            ack_replicas: 4,
            ..Default::default()
        };
        let c4 = Client::connect_with(&front, too_many).await.unwrap();
        let err = c4.put("k4", value(1)).await.unwrap_err();
        assert!(
            err.to_string().contains("replicas"),
            "asking for 4 acknowledgements of 3 replicas: {err}"
        );
    });
    let counts = replica_counts(&all, &acked_keys);
    assert!(
        counts.values().all(|&c| c == 3),
        "acknowledged with 3 replicas but held by fewer: {:?}",
        counts
            .iter()
            .filter(|(_, &c)| c != 3)
            .take(5)
            .collect::<Vec<_>>()
    );
    let batch: Vec<String> = (0..50).map(|i| format!("batch:{i}")).collect();
    assert!(replica_counts(&all, &batch).values().all(|&c| c == 3));

    // The default acknowledges after the local merge: gossip (a day away) has not
    // spread these yet.
    let lazy_keys: Vec<String> = (0..200).map(|i| format!("lazy:{i}")).collect();
    write_all(nodes[0].native, &lazy_keys);
    let counts = replica_counts(&all, &lazy_keys);
    assert!(
        counts.values().all(|&c| c == 1),
        "default writes should wait for gossip: {:?}",
        counts
            .iter()
            .filter(|(_, &c)| c != 1)
            .take(5)
            .collect::<Vec<_>>()
    );
}

/// The worker addresses holding `key`, from placement.
fn replica_addrs(node: &NodeProc, key: &str) -> Vec<std::net::SocketAddr> {
    let layout = Layout::from_topology(&topology(node.native));
    layout
        .replicas(key.as_bytes())
        .into_iter()
        .map(|r| layout.addr(r).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn get_all_merges_every_replica_and_put_all_reaches_them_all() {
    let _serial = serial();
    let nodes = cluster_with(3, WITHOUT_GOSSIP);
    let replicas = replica_addrs(&nodes[0], "tags");
    assert_eq!(replicas.len(), 3);
    // A different member written at each replica, straight to its worker port.
    for (i, addr) in replicas.iter().enumerate() {
        let mut n = Native::connect(*addr);
        let resp = n.call(Op::Update(pb::Update {
            key: "tags".into(),
            op: Some(pb::update::Op::SetAdd(pb::update::SetAdd {
                members: vec![format!("m{i}").into()],
            })),
        }));
        assert!(matches!(resp.result, Some(R::Ack(_))), "{resp:?}");
    }
    rt().block_on(async {
        let c = Client::connect(&nodes[1].native.to_string()).await.unwrap();
        let members = |v: Option<Value>| match v {
            Some(Value::OrSet(s)) => s.iter().map(|m| m.to_vec()).collect::<BTreeSet<_>>(),
            other => panic!("{other:?}"),
        };
        // One replica has one member; GetAll has all three.
        assert_eq!(members(c.get("tags").await.unwrap()).len(), 1);
        assert_eq!(
            members(c.get_all("tags").await.unwrap()),
            ["m0", "m1", "m2"]
                .iter()
                .map(|m| m.as_bytes().to_vec())
                .collect()
        );
        c.put_all("everywhere", value(7)).await.unwrap();
    });
    let all: Vec<&NodeProc> = nodes.iter().collect();
    let counts = replica_counts(&all, &["everywhere".to_string()]);
    assert_eq!(counts["everywhere"], 3, "PutAll reached every replica");
}
