//! Hand-off and the peer plane, with real `latticekv server` processes on 127.0.0.1 (free
//! ports): client ports refusing peer messages, a hand-off recipient that crashes right
//! after acknowledging, the same crash against a sender broken on purpose
//! (`LATTICEKV_FAULT=drop-after-first-ack`) to show the check catches it, a leave under
//! write load, and writes after a reclaimed delete.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::routing::Layout;
use common::{eventually, serial, Native, NodeProc, Resp};
use lattice::{Lww, Timestamp, Value};
use wire::convert::value_to_pb;
use wire::pb::{self, request::Op, response::Result as R};

/// Flags of every node here: two workers, fast membership gossip, and `replication` nodes
/// per key; a member silent for `failure_ms` is declared dead (suspected sooner).
fn flags<'a>(replication: &'a str, failure_ms: &'a str) -> Vec<&'a str> {
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

fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    let mut f = base.to_vec();
    f.extend_from_slice(more);
    f
}

/// Starts a node per id, each joining through the first, with `env` (faults), and waits
/// until every node sees all of them alive.
fn cluster(ids: &[&str], f: &[&str], env: &[(&str, &str)]) -> Vec<NodeProc> {
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

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn topology(addr: SocketAddr) -> pb::Topology {
    let mut c = Native::connect(addr);
    match c.call(Op::Topology(pb::GetTopology {})).result {
        Some(R::Topology(t)) => t,
        other => panic!("{other:?}"),
    }
}

/// Storage members `node` sees alive.
fn alive_members(node: &NodeProc) -> usize {
    topology(node.native)
        .members
        .iter()
        .filter(|m| m.role == "memory" && m.status == pb::NodeStatus::Alive as i32)
        .count()
}

/// The status `node` believes member `id` has.
fn status_of(node: &NodeProc, id: &str) -> Option<pb::NodeStatus> {
    topology(node.native)
        .members
        .iter()
        .find(|m| m.node_id == id)
        .and_then(|m| pb::NodeStatus::try_from(m.status).ok())
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}:{i:06}")).collect()
}

/// The value written to the `i`th key (an LWW register with a fixed timestamp, so a
/// value read back is this write, not another one).
fn value(i: usize) -> Value {
    let ts = Timestamp::new(((i as u64) + 1) << 16, 77);
    Value::Lww(Lww::new(ts, format!("value-{i}").into_bytes().into()))
}

/// Writes `keys[i] = value(i)` through `front`, in batches.
fn write_all(front: SocketAddr, keys: &[String]) {
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
fn unreadable(front: SocketAddr, keys: &[String]) -> Vec<usize> {
    let items: Vec<(String, usize)> = keys.iter().cloned().zip(0..).collect();
    unreadable_items(front, &items)
}

/// The items (indexes into `items`) whose key a read through `front` does not return with
/// `value(n)`, for each `(key, n)`.
fn unreadable_items(front: SocketAddr, items: &[(String, usize)]) -> Vec<usize> {
    let mut c = Native::connect(front);
    let mut bad = Vec::new();
    for (n, chunk) in items.chunks(500).enumerate() {
        let resp = c.call(Op::GetMany(pb::GetMany {
            keys: chunk.iter().map(|(k, _)| k.clone().into()).collect(),
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
fn holders(nodes: &[&NodeProc], keys: &[String]) -> HashMap<String, BTreeSet<String>> {
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
fn replica_counts(nodes: &[&NodeProc], keys: &[String]) -> HashMap<String, usize> {
    let mut counts: HashMap<String, usize> = keys.iter().map(|k| (k.clone(), 0)).collect();
    for held in holders(nodes, keys).values() {
        for k in held {
            *counts.get_mut(k).unwrap() += 1;
        }
    }
    counts
}

/// Waits until `node`'s process exits, and returns how.
fn wait_exit(node: &mut NodeProc, timeout: Duration) -> ExitStatus {
    let mut status = None;
    eventually(timeout, || {
        status = node.child.try_wait().unwrap();
        status.is_some()
    });
    status.unwrap_or_else(|| panic!("node {} did not exit", node.native))
}

// ---- the client port and the peer plane ------------------------------------------------

fn error_of(resp: &pb::Response) -> &pb::Error {
    match &resp.result {
        Some(R::Error(e)) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

fn put_get(c: &mut Native, key: &str, v: &str) {
    let value = Value::Lww(Lww::new(
        Timestamp::new(1 << 20, 5),
        v.as_bytes().to_vec().into(),
    ));
    let resp = c.call(Op::Put(pb::Put {
        key: key.to_string().into(),
        value: Some(value_to_pb(&value)),
    }));
    assert!(
        matches!(resp.result, Some(R::Ack(_))),
        "PUT {key}: {resp:?}"
    );
    let resp = c.call(Op::Get(pb::Get {
        key: key.to_string().into(),
    }));
    match resp.result {
        Some(R::Get(g)) => assert_eq!(g.value, Some(value_to_pb(&value)), "GET {key}"),
        other => panic!("GET {key}: {other:?}"),
    }
}

/// A key `port` serves itself: any key for the front port, one the worker replicates for
/// a worker's own port (which redirects the others).
fn key_served_at(node: &NodeProc, port: SocketAddr, prefix: &str) -> String {
    if port == node.native {
        return prefix.to_string();
    }
    let candidates: Vec<String> = (0..64).map(|i| format!("{prefix}-{i}")).collect();
    let mut c = Native::connect(node.native);
    let resp = c.call(Op::Locate(pb::Locate {
        keys: candidates.iter().map(|k| k.clone().into()).collect(),
    }));
    let Some(R::Locations(l)) = resp.result else {
        panic!("{resp:?}")
    };
    let port = port.to_string();
    candidates
        .into_iter()
        .zip(l.keys)
        .find(|(_, at)| at.replicas.contains(&port))
        .map(|(k, _)| k)
        .expect("one of 64 keys on each of 2 workers")
}

fn admin(c: &mut Native, op: Option<pb::admin::Op>) -> pb::Response {
    c.call(Op::Admin(pb::Admin { op }))
}

/// Client ports (the shared front port and a worker's own port) answer every peer-plane
/// message a `Request` can still carry, and the operator requests in their pre-`Admin`
/// form, with BAD_REQUEST naming where they belong; a raw peer-plane frame is not a
/// request and gets BAD_REQUEST too; the connection and the node go on serving. The
/// `Admin` requests are served on a client port: forget and set_replication are checked
/// (and refused with INVALID_ARGUMENT where the cluster does not allow them), and a forced
/// leave stops the node.
#[test]
fn a_client_connection_sending_a_peer_message_is_refused_and_the_node_keeps_serving() {
    let _serial = serial();
    let mut node = NodeProc::server("solo", None, &flags("1", "2000"));
    let peer_plane: Vec<(&str, Op)> = vec![
        ("Replicate", Op::Replicate(pb::Refused {})),
        ("Forward", Op::Forward(pb::Refused {})),
        ("AntiEntropy", Op::AntiEntropy(pb::Refused {})),
        ("SyncCluster", Op::SyncCluster(pb::Refused {})),
        ("Fetch", Op::Fetch(pb::Refused {})),
    ];
    let old_admin: Vec<(&str, Op)> = vec![
        ("SetReplication", Op::SetReplication(pb::Refused {})),
        ("Leave", Op::Leave(pb::Refused {})),
    ];
    for port in [node.native, node.workers[0]] {
        let mut c = Native::connect(port);
        for (name, op) in peer_plane.clone() {
            let resp = c.call(op);
            let e = error_of(&resp);
            assert_eq!(e.code, pb::ErrorCode::BadRequest as i32, "{name}: {e:?}");
            assert!(
                e.message.contains(name) && e.message.contains("peer port"),
                "{name} on {port}: {}",
                e.message
            );
        }
        for (name, op) in old_admin.clone() {
            let resp = c.call(op);
            let e = error_of(&resp);
            assert_eq!(e.code, pb::ErrorCode::BadRequest as i32, "{name}: {e:?}");
            assert!(
                e.message.contains(name) && e.message.contains("Request.admin"),
                "{name} on {port}: {}",
                e.message
            );
        }
        // The same connection still serves.
        put_get(&mut c, &key_served_at(&node, port, "after-refusals"), "v1");

        // A raw peer-plane frame (what a node sends first on a peer connection) is not a
        // client request: BAD_REQUEST with id 0, and the framing is intact.
        let hello = pb::PeerHello {
            version: 1,
            node_id: "intruder".into(),
            from_worker: Some(0),
            to_worker: Some(0),
        };
        let mut frame = Vec::new();
        wire::frame::encode(&hello, &mut frame);
        std::io::Write::write_all(&mut c.stream, &frame).unwrap();
        let resp = c.read();
        assert_eq!(resp.id, 0);
        let e = error_of(&resp);
        assert_eq!(e.code, pb::ErrorCode::BadRequest as i32, "{e:?}");
        assert!(e.message.contains("undecodable"), "{}", e.message);
        put_get(&mut c, &key_served_at(&node, port, "after-hello"), "v2");
    }
    // A fresh connection too.
    put_get(&mut Native::connect(node.native), "fresh", "v3");

    // Operator requests are served on client ports, as `Admin`.
    let mut c = Native::connect(node.native);
    let e = error_of(&admin(&mut c, None)).clone();
    assert_eq!(e.code, pb::ErrorCode::BadRequest as i32, "{e:?}");
    let forget = |id: &str| Some(pb::admin::Op::Forget(pb::Forget { node_id: id.into() }));
    let e = error_of(&admin(&mut c, forget("nobody"))).clone();
    assert_eq!(e.code, pb::ErrorCode::InvalidArgument as i32, "{e:?}");
    assert!(e.message.contains("no member"), "{}", e.message);
    let e = error_of(&admin(&mut c, forget("solo"))).clone();
    assert_eq!(e.code, pb::ErrorCode::InvalidArgument as i32, "{e:?}");
    assert!(e.message.contains("itself"), "{}", e.message);
    let vector = |global| {
        Some(pb::admin::Op::SetReplication(pb::SetReplication {
            key: "tuned".into(),
            global,
            local: 2,
            ..Default::default()
        }))
    };
    let e = error_of(&admin(&mut c, vector(0))).clone();
    assert_eq!(e.code, pb::ErrorCode::InvalidArgument as i32, "{e:?}");
    let resp = admin(&mut c, vector(1));
    assert!(
        matches!(resp.result, Some(R::Ack(pb::Ack { count: 1 }))),
        "{resp:?}"
    );
    assert!(
        topology(node.native)
            .replication
            .iter()
            .any(|r| &r.key[..] == b"tuned" && r.local == 2),
        "the vector set through a client port is in the topology"
    );
    put_get(&mut c, "after-admin", "v4");

    // A leave, forced (a node alone has nowhere to hand its keys): acknowledged, then the
    // node stops on its own, with success.
    let resp = admin(
        &mut c,
        Some(pb::admin::Op::Leave(pb::Leave { force: true })),
    );
    assert!(matches!(resp.result, Some(R::Ack(_))), "{resp:?}");
    let status = wait_exit(&mut node, Duration::from_secs(15));
    assert!(status.success(), "the node left and exited with {status}");
}

// ---- a hand-off recipient that crashes right after acknowledging --------------------------

/// The fault that makes a node abort right after it acknowledged its first hand-off batch,
/// as a `kill -9` at the worst moment for the sender would.
const ABORT_AFTER_ACK: (&str, &str) = ("LATTICEKV_FAULT", "abort-after-handoff-ack");

/// The fault that makes a sender drop a handed-off key once the first of its new replicas
/// acknowledged it, instead of all of them (a deliberate bug).
const DROP_AFTER_FIRST_ACK: (&str, &str) = ("LATTICEKV_FAULT", "drop-after-first-ack");

fn assert_aborted(status: ExitStatus, who: &str) {
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "{who} should have aborted right after acknowledging a hand-off batch, it exited \
         with {status}"
    );
}

/// Waits until every one of `nodes` sees member `id` as dead.
fn wait_dead(nodes: &[&NodeProc], id: &str) {
    for n in nodes {
        assert!(
            eventually(Duration::from_secs(20), || status_of(n, id)
                == Some(pb::NodeStatus::Dead)),
            "{} does not see {id} dead: {:?}",
            n.native,
            status_of(n, id)
        );
    }
}

/// Replication 1: a node `c` joins two nodes holding 2,000 keys, acknowledges the first
/// batch of keys handed to it (durably: it has a write-ahead log), and aborts. The senders
/// dropped the keys it acknowledged, and kept the others. So once `c` is declared dead the
/// survivors miss only keys placed on `c`; restarted on its data directory (without the
/// fault), `c` brings them back, and every key is readable with its value.
#[test]
fn a_hand_off_recipient_killed_right_after_acknowledging_loses_no_key() {
    let _serial = serial();
    let f = flags("1", "3000");
    let nodes = cluster(&["a", "b"], &f, &[]);
    let survivors: Vec<&NodeProc> = nodes.iter().collect();
    let keys = keys("key", 2_000);
    write_all(nodes[0].native, &keys);
    assert!(unreadable(nodes[0].native, &keys).is_empty());

    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap().to_string();
    let c_flags = with(&f, &["--data-dir", &dir]);
    let mut c = NodeProc::server_env("c", Some(nodes[0].native), &c_flags, &[ABORT_AFTER_ACK]);
    assert_aborted(wait_exit(&mut c, Duration::from_secs(20)), "c");
    drop(c);

    // The ring settles without c.
    wait_dead(&survivors, "c");
    let missing = unreadable(nodes[0].native, &keys);
    eprintln!(
        "{} keys only on the crashed recipient's disk while it is down",
        missing.len()
    );

    // c comes back on its data directory, without the fault.
    let c = NodeProc::server("c", Some(nodes[0].native), &c_flags);
    let all: Vec<&NodeProc> = vec![&nodes[0], &nodes[1], &c];
    for n in &all {
        assert!(
            eventually(Duration::from_secs(20), || alive_members(n) == 3),
            "{} does not see c back",
            n.native
        );
    }
    // What the survivors missed is what c had acknowledged: keys placed on c.
    let layout = Layout::from_topology(&topology(nodes[0].native));
    let on_c: BTreeSet<String> = c.workers.iter().map(|w| w.to_string()).collect();
    for &i in &missing {
        let owners: Vec<String> = layout
            .replicas(keys[i].as_bytes())
            .into_iter()
            .map(|r| layout.addr(r).unwrap().to_string())
            .collect();
        assert!(
            owners.iter().all(|o| on_c.contains(o)),
            "{} was lost by the survivors though it is not placed on c: {owners:?}",
            keys[i]
        );
    }
    let mut bad = Vec::new();
    let ok = eventually(Duration::from_secs(20), || {
        bad = unreadable(nodes[0].native, &keys);
        bad.is_empty()
    });
    assert!(
        ok,
        "{} keys unreadable after the recipient came back, e.g. {:?}",
        bad.len(),
        bad.iter().take(5).map(|&i| &keys[i]).collect::<Vec<_>>()
    );
}

/// Two nodes `a` and `d` hold 2,000 keys at replication 2; `d` is killed, and while it is
/// not yet declared dead a node `c` joins, acknowledges its first hand-off batch and
/// aborts. The keys that moved from {a, d} to {c, d} went from `a` to both `c` and `d`:
/// `a` must keep each until both acknowledged — `d` never does — so once `c` and `d` are
/// declared dead every key is still on `a`. Returns the keys (indexes) that are not
/// readable with their value from `a` then: the check.
fn crash_a_recipient_during_hand_off(sender_env: &[(&str, &str)], keys: &[String]) -> Vec<usize> {
    // Long enough a failure timeout that `d` is still in the ring when `c` joins.
    let f = flags("2", "4000");
    let mut nodes = cluster(&["a", "d"], &f, sender_env);
    write_all(nodes[0].native, keys);
    let both: Vec<&NodeProc> = nodes.iter().collect();
    assert!(
        eventually(Duration::from_secs(20), || replica_counts(&both, keys)
            .values()
            .all(|&n| n == 2)),
        "not every key reached its 2 replicas"
    );
    let mut d = nodes.pop().unwrap();
    let _ = d.child.kill();
    let _ = d.child.wait();
    let a = &nodes[0];
    let mut c = NodeProc::server_env("c", Some(a.native), &f, &[ABORT_AFTER_ACK]);
    // Only a hand-off batch makes c abort, and `a` hands keys off to c only if `d` is
    // still in its ring (with a and c alone, `a` replicates every key): so this also
    // shows the crash came while d was a replica.
    assert_aborted(wait_exit(&mut c, Duration::from_secs(20)), "c");
    drop(c);
    wait_dead(&[a], "c");
    wait_dead(&[a], "d");
    let mut lost = Vec::new();
    eventually(Duration::from_secs(5), || {
        lost = unreadable(a.native, keys);
        lost.is_empty()
    });
    lost
}

/// The deliberate break: the same crash as in [`crash_a_recipient_during_hand_off`], once
/// with a correct sender and once with a sender started with
/// `LATTICEKV_FAULT=drop-after-first-ack`. The correct one loses nothing; the broken one
/// drops the keys `c` acknowledged though `d` never did, and they are gone for good (`a`,
/// the only process left, holds none of them). The same check passes on correct code and
/// fails on broken code.
///
/// The loss is deterministic: every hand-off batch `a` sends to `c` carries keys whose
/// other new replica is the dead `d` (the keys leaving `a` are exactly those moving from
/// {a, d} to {c, d}), and `c` aborts only after acknowledging such a batch.
#[test]
fn a_deliberately_broken_hand_off_loses_keys_and_the_check_sees_it() {
    let _serial = serial();
    let keys = keys("key", 2_000);
    let lost = crash_a_recipient_during_hand_off(&[], &keys);
    assert!(
        lost.is_empty(),
        "a correct sender lost {} keys, e.g. {:?}",
        lost.len(),
        lost.iter().take(5).map(|&i| &keys[i]).collect::<Vec<_>>()
    );
    let lost = crash_a_recipient_during_hand_off(&[DROP_AFTER_FIRST_ACK], &keys);
    eprintln!(
        "the broken sender lost {} of {} keys",
        lost.len(),
        keys.len()
    );
    assert!(
        !lost.is_empty(),
        "the sender broken on purpose lost no key: the check would not catch the bug"
    );
}

// ---- a leave under write load ------------------------------------------------------------

/// Three nodes at replication 1 hold 2,000 keys; a writer keeps writing new keys through
/// the first node while the third leaves (`latticekv leave`), and goes on after it exited.
/// The leave succeeds, the node exits with success, and every key acknowledged to the
/// writer — before, during and after the leave — is on exactly one remaining node and
/// readable with its value.
#[test]
fn a_leave_under_load_hands_off_every_key() {
    let _serial = serial();
    let f = flags("1", "3000");
    let mut nodes = cluster(&["n1", "n2", "n3"], &f, &[]);
    let before = keys("key", 2_000);
    write_all(nodes[0].native, &before);
    let mut leaving = nodes.pop().unwrap();
    let held: usize = holders(&[&leaving], &before)
        .values()
        .map(BTreeSet::len)
        .sum();
    assert!(held > 300, "the leaving node held {held} keys");

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (stop, acked) = (stop.clone(), acked.clone());
        let front = nodes[0].native;
        std::thread::spawn(move || {
            let mut c = Native::connect(front);
            let (mut ok, mut errors) = (Vec::new(), Vec::new());
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let resp = c.call(Op::Put(pb::Put {
                    key: format!("live:{i:06}").into(),
                    value: Some(value_to_pb(&value(i))),
                }));
                match resp.result {
                    Some(R::Ack(_)) => {
                        ok.push(i);
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    other => errors.push(format!("live:{i:06}: {other:?}")),
                }
                i += 1;
            }
            (ok, errors)
        })
    };
    assert!(
        eventually(Duration::from_secs(10), || acked.load(Ordering::Relaxed)
            >= 100),
        "the writer does not get going"
    );
    let at_leave = acked.load(Ordering::Relaxed);
    let started = Instant::now();
    let out = leaving.cli(&["leave", "--addr", &leaving.native.to_string()]);
    assert!(
        out.status.success(),
        "leave: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let during = acked.load(Ordering::Relaxed) - at_leave;
    let status = wait_exit(&mut leaving, Duration::from_secs(15));
    eprintln!(
        "leave took {:?}; {during} writes acknowledged meanwhile",
        started.elapsed()
    );
    assert!(status.success(), "the node that left exited with {status}");
    // Writes go on after it is gone.
    let at_exit = acked.load(Ordering::Relaxed);
    assert!(
        eventually(Duration::from_secs(10), || acked.load(Ordering::Relaxed)
            >= at_exit + 100),
        "writes stalled after the leave"
    );
    stop.store(true, Ordering::Relaxed);
    let (ok, errors) = writer.join().unwrap();
    assert!(during > 0, "no write was acknowledged during the leave");
    assert!(
        errors.is_empty(),
        "{} writes failed, e.g. {:?}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );

    let live: Vec<(String, usize)> = ok.iter().map(|&i| (format!("live:{i:06}"), i)).collect();
    let mut items: Vec<(String, usize)> = before.iter().cloned().zip(0..).collect();
    items.extend(live);
    let all_keys: Vec<String> = items.iter().map(|(k, _)| k.clone()).collect();
    let rest: Vec<&NodeProc> = nodes.iter().collect();
    let mut bad = Vec::new();
    let settled = eventually(Duration::from_secs(20), || {
        bad = unreadable_items(nodes[0].native, &items);
        bad.is_empty() && replica_counts(&rest, &all_keys).values().all(|&n| n == 1)
    });
    let counts = replica_counts(&rest, &all_keys);
    assert!(
        settled,
        "{} of {} acknowledged keys unreadable (e.g. {:?}); {} not on exactly one node",
        bad.len(),
        items.len(),
        bad.iter().take(5).map(|&i| &items[i].0).collect::<Vec<_>>(),
        counts.values().filter(|&&n| n != 1).count()
    );
    for n in &nodes {
        assert_eq!(status_of(n, "n3"), Some(pb::NodeStatus::Left));
    }
}

// ---- writes after a reclaimed delete -----------------------------------------------------

/// `key`'s value as `node` itself holds it, read at the worker that stores it (a worker's
/// own port answers from its replica and never forwards); `None` if no worker stores it or
/// it holds a tombstone.
fn own_value(node: &NodeProc, key: &str) -> Option<pb::Value> {
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

fn holders_at(c: &mut Native, key: &str) -> bool {
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

/// Members of an OR-set as `node` holds it.
fn own_members(node: &NodeProc, key: &str) -> Option<BTreeSet<String>> {
    match own_value(node, key)?.kind? {
        pb::value::Kind::OrSet(s) => Some(
            s.entries
                .iter()
                .map(|e| String::from_utf8_lossy(&e.member).into_owned())
                .collect(),
        ),
        other => panic!("{key} is not an OR-set: {other:?}"),
    }
}

/// A counter's value as `node` holds it.
fn own_counter(node: &NodeProc, key: &str) -> Option<i64> {
    match own_value(node, key)?.kind? {
        pb::value::Kind::Counter(c) => Some(
            c.entries
                .iter()
                .map(|e| e.increments as i64 - e.decrements as i64)
                .sum(),
        ),
        other => panic!("{key} is not a counter: {other:?}"),
    }
}

/// True if `f` stays true for all of `period` (polled): for states that must not change.
fn stays(period: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + period;
    while Instant::now() < end {
        if !f() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Two nodes at replication 2 with a tombstone grace of 1 s (config file): a set and a
/// counter are written and deleted; once both replicas reclaimed the tombstones (no
/// worker of either node stores the keys any more: `Holds`), the set takes a new member
/// and the counter a new increment. On each node, through rounds of anti-entropy, the set
/// is exactly the new member and the counter 1: the new writes survive and the deleted
/// state does not come back.
#[test]
fn sadd_and_incr_after_a_reclaimed_delete_survive() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(&config, "tombstone_grace_secs = 1\n").unwrap();
    let f = [
        "--config",
        config.to_str().unwrap(),
        "--workers",
        "2",
        "--cluster-gossip-ms",
        "100",
        "--failure-timeout-ms",
        "3000",
        "--anti-entropy-ms",
        "300",
        "--replication",
        "2",
    ];
    let nodes = cluster(&["r1", "r2"], &f, &[]);
    let all: Vec<&NodeProc> = nodes.iter().collect();
    let names = ["s".to_string(), "c".to_string()];
    let mut r = Resp::connect(nodes[0].resp);
    r.roundtrip(&[b"SADD", b"s", b"a"], b":1\r\n");
    r.roundtrip(&[b"INCR", b"c"], b":1\r\n");
    let a: BTreeSet<String> = ["a".to_string()].into();
    assert!(
        eventually(Duration::from_secs(10), || all.iter().all(|n| own_members(
            n, "s"
        ) == Some(
            a.clone()
        ) && own_counter(n, "c")
            == Some(1))),
        "the first writes did not reach both replicas"
    );
    r.roundtrip(&[b"DEL", b"s", b"c"], b":2\r\n");
    // Both replicas held the values: a key no worker stores any more is a reclaimed
    // tombstone.
    assert!(
        eventually(Duration::from_secs(15), || replica_counts(&all, &names)
            .values()
            .all(|&n| n == 0)),
        "the tombstones were not reclaimed: {:?}",
        replica_counts(&all, &names)
    );

    r.roundtrip(&[b"SADD", b"s", b"b"], b":1\r\n");
    r.roundtrip(&[b"INCR", b"c"], b":1\r\n");
    let b: BTreeSet<String> = ["b".to_string()].into();
    let converged = || {
        all.iter()
            .all(|n| own_members(n, "s") == Some(b.clone()) && own_counter(n, "c") == Some(1))
    };
    assert!(
        eventually(Duration::from_secs(10), converged),
        "after the reclaimed delete: {:?}",
        all.iter()
            .map(|n| (own_members(n, "s"), own_counter(n, "c")))
            .collect::<Vec<_>>()
    );
    // Anti-entropy runs every 300 ms: several rounds, and nothing old comes back.
    assert!(
        stays(Duration::from_secs(2), converged),
        "the state changed afterwards: {:?}",
        all.iter()
            .map(|n| (own_members(n, "s"), own_counter(n, "c")))
            .collect::<Vec<_>>()
    );
    for n in &all {
        let mut r = Resp::connect(n.resp);
        r.roundtrip(&[b"SMEMBERS", b"s"], b"*1\r\n$1\r\nb\r\n");
        r.roundtrip(&[b"GET", b"c"], b"$1\r\n1\r\n");
    }
}
