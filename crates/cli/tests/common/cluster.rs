//! Clusters of real `latticekv server` processes on 127.0.0.1 for the hand-off and
//! peer-plane tests: starting them (faults included), writing and reading keys, and asking
//! each worker what it holds (`Holds`, which never forwards).

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use lattice::{Lww, Timestamp, Value};
use wire::convert::value_to_pb;
use wire::pb::{self, request::Op, response::Result as R};

pub use testkit::rt;

use super::{eventually, Native, NodeProc};

/// Flags of every node here: two workers, fast membership gossip, and `replication` nodes
/// per key; a member silent for `failure_ms` is declared dead (suspected sooner).
pub fn flags<'a>(replication: &'a str, failure_ms: &'a str) -> Vec<&'a str> {
    vec![
        "--workers",
        "2",
        "--cluster-gossip-ms",
        "100",
        "--failure-timeout-ms",
        failure_ms,
        "--anti-entropy-ms",
        "2000",
        "--replication",
        replication,
    ]
}

pub fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    let mut f = base.to_vec();
    f.extend_from_slice(more);
    f
}

/// Starts a node per id, each joining through the first, with `env` (faults), and waits
/// until every node sees all of them alive.
pub fn cluster(ids: &[&str], f: &[&str], env: &[(&str, &str)]) -> Vec<NodeProc> {
    let first = NodeProc::server_env(ids[0], None, f, env);
    let seed = first.native;
    let mut nodes = vec![first];
    for id in &ids[1..] {
        nodes.push(NodeProc::server_env(id, Some(seed), f, env));
    }
    for node in &nodes {
        assert!(
            eventually(Duration::from_secs(20), || alive_members(node) == ids.len()),
            "node {} did not see {} members",
            node.native,
            ids.len()
        );
    }
    nodes
}

pub fn topology(addr: SocketAddr) -> pb::Topology {
    let mut c = Native::connect(addr);
    match c.call(Op::Topology(pb::GetTopology::default())).result {
        Some(R::Topology(t)) => t,
        other => panic!("{other:?}"),
    }
}

/// Storage members `node` sees alive.
pub fn alive_members(node: &NodeProc) -> usize {
    topology(node.native)
        .members
        .iter()
        .filter(|m| m.role == "memory" && m.status == pb::NodeStatus::Alive as i32)
        .count()
}

/// The status `node` believes member `id` has.
pub fn status_of(node: &NodeProc, id: &str) -> Option<pb::NodeStatus> {
    topology(node.native)
        .members
        .iter()
        .find(|m| m.node_id == id)
        .and_then(|m| pb::NodeStatus::try_from(m.status).ok())
}

pub fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}:{i:06}")).collect()
}

/// The value written to the `i`th key (an LWW register with a fixed timestamp, so a
/// value read back is this write, not another one).
pub fn value(i: usize) -> Value {
    let ts = Timestamp::new(((i as u64) + 1) << 16, 77);
    Value::Lww(Lww::new(ts, format!("value-{i}").into_bytes().into()))
}

/// Writes `keys[i] = value(i)` through `front`, in batches.
pub fn write_all(front: SocketAddr, keys: &[String]) {
    rt().block_on(async {
        let c = client::Client::connect(&front.to_string()).await.unwrap();
        for (n, chunk) in keys.chunks(500).enumerate() {
            let items: Vec<(String, Value)> = chunk
                .iter()
                .enumerate()
                .map(|(i, k)| (k.clone(), value(n * 500 + i)))
                .collect();
            c.put_many(&items).await.unwrap();
        }
    });
}

/// The keys (indexes) that a read through `front` does not return with their value
/// (`keys[i] = value(i)`): absent, another value, or an error for that key.
pub fn unreadable(front: SocketAddr, keys: &[String]) -> Vec<usize> {
    let items: Vec<(String, usize)> = keys.iter().cloned().zip(0..).collect();
    unreadable_items(front, &items)
}

/// The items (indexes into `items`) whose key a read through `front` does not return with
/// `value(n)`, for each `(key, n)`.
pub fn unreadable_items(front: SocketAddr, items: &[(String, usize)]) -> Vec<usize> {
    let mut c = Native::connect(front);
    let mut bad = Vec::new();
    for (n, chunk) in items.chunks(500).enumerate() {
        let resp = c.call(Op::GetMany(pb::GetMany {
            keys: chunk.iter().map(|(k, _)| k.clone().into()).collect(),
            ..Default::default()
        }));
        let Some(R::Multi(m)) = resp.result else {
            panic!("GetMany: {resp:?}")
        };
        assert_eq!(m.results.len(), chunk.len());
        for (i, (r, (_, v))) in m.results.iter().zip(chunk).enumerate() {
            let want = value_to_pb(&value(*v));
            let ok = matches!(&r.result,
                Some(pb::key_result::Result::Get(g)) if g.value.as_ref() == Some(&want));
            if !ok {
                bad.push(n * 500 + i);
            }
        }
    }
    bad
}

/// Every worker's holdings: worker address → the keys it stores (asked with `Holds`, which
/// never forwards).
pub fn holders(nodes: &[&NodeProc], keys: &[String]) -> HashMap<String, BTreeSet<String>> {
    let mut out = HashMap::new();
    for node in nodes {
        for w in &node.workers {
            let mut c = Native::connect(*w);
            let resp = c.call(Op::Holds(pb::Holds {
                keys: keys.iter().map(|k| k.clone().into()).collect(),
            }));
            let Some(R::Multi(m)) = resp.result else {
                panic!("{resp:?}")
            };
            let held: BTreeSet<String> = m
                .results
                .iter()
                .zip(keys)
                .filter(|(r, _)| {
                    matches!(r.result, Some(pb::key_result::Result::Ack(ref a)) if a.count == 1)
                })
                .map(|(_, k)| k.clone())
                .collect();
            out.insert(w.to_string(), held);
        }
    }
    out
}

/// Number of workers of `nodes` holding each key.
pub fn replica_counts(nodes: &[&NodeProc], keys: &[String]) -> HashMap<String, usize> {
    let mut counts: HashMap<String, usize> = keys.iter().map(|k| (k.clone(), 0)).collect();
    for held in holders(nodes, keys).values() {
        for k in held {
            *counts.get_mut(k).unwrap() += 1;
        }
    }
    counts
}

/// Waits until `node`'s process exits, and returns how.
pub fn wait_exit(node: &mut NodeProc, timeout: Duration) -> ExitStatus {
    let mut status = None;
    eventually(timeout, || {
        status = node.child.try_wait().unwrap();
        status.is_some()
    });
    status.unwrap_or_else(|| panic!("node {} did not exit", node.native))
}

/// `key`'s value as `node` itself holds it, read at the worker that stores it (a worker's
/// own port answers from its replica and never forwards); `None` if no worker stores it or
/// it holds a tombstone.
pub fn own_value(node: &NodeProc, key: &str) -> Option<pb::Value> {
    for w in &node.workers {
        let mut c = Native::connect(*w);
        if !holders_at(&mut c, key) {
            continue;
        }
        let resp = c.call(Op::Get(pb::Get {
            key: key.to_string().into(),
        }));
        match resp.result {
            Some(R::Get(g)) => return g.value,
            other => panic!("GET {key} at {w}: {other:?}"),
        }
    }
    None
}

pub fn holders_at(c: &mut Native, key: &str) -> bool {
    let resp = c.call(Op::Holds(pb::Holds {
        keys: vec![key.to_string().into()],
    }));
    match resp.result {
        Some(R::Multi(m)) => matches!(
            m.results[0].result,
            Some(pb::key_result::Result::Ack(pb::Ack { count: 1 }))
        ),
        other => panic!("{other:?}"),
    }
}

/// True if `f` stays true for all of `period` (polled): for states that must not change.
pub fn stays(period: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + period;
    while Instant::now() < end {
        if !f() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}
