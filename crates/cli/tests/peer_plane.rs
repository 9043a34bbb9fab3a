//! The peer plane seen from outside, with real `latticekv server` processes on 127.0.0.1
//! (free ports): client ports refusing peer-plane messages, tombstone reclamation (a
//! peer-plane exchange) followed by new writes, and anti-entropy repairing a replica that
//! restarted empty.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::cluster::*;
use common::{eventually, serial, Native, NodeProc, Resp};
use lattice::{Lww, Timestamp, Value};
use wire::convert::value_to_pb;
use wire::pb::{self, request::Op, response::Result as R};

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
            ..Default::default()
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

        // A raw peer request is refused too, and never read as another operation: its
        // field numbers are not a client request's (a digest naming "victim" once decoded
        // as a client DELETE of "victim").
        let victim = key_served_at(&node, port, "victim");
        put_get(&mut c, &victim, "still here");
        let digest = pb::PeerRequest {
            id: 9,
            msg: Some(pb::peer_request::Msg::Digest(pb::AntiEntropyDigest {
                sender_node: victim.clone(),
                ..Default::default()
            })),
        };
        let mut frame = Vec::new();
        wire::frame::encode(&digest, &mut frame);
        std::io::Write::write_all(&mut c.stream, &frame).unwrap();
        let resp = c.read();
        let e = error_of(&resp);
        assert_eq!(e.code, pb::ErrorCode::BadRequest as i32, "{e:?}");
        let got = c.call(Op::Get(pb::Get {
            key: victim.clone().into(),
        }));
        assert!(
            format!("{got:?}").contains("still here"),
            "a raw peer request changed {victim}: {got:?}"
        );
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

// ---- writes after a reclaimed delete -----------------------------------------------------

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

// ---- anti-entropy repairing a replica that restarted empty -------------------------------

/// Size of each value of the repair test.
const REPAIR_VALUE_BYTES: usize = 100 << 10;

/// MiB of data the repair test writes: `LATTICEKV_TEST_REPAIR_MIB`, 120 by default.
fn repair_mib() -> usize {
    std::env::var("LATTICEKV_TEST_REPAIR_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120)
}

/// The values of the repair test: `REPAIR_VALUE_BYTES` bytes each, every one a different
/// rotation of one pattern (cheap to build in a debug build), with its own timestamp.
fn big_values(n: usize) -> Vec<pb::Value> {
    let pattern: Vec<u8> = (0..REPAIR_VALUE_BYTES)
        .map(|j| (j.wrapping_mul(7) ^ (j >> 8)) as u8)
        .collect();
    (0..n)
        .map(|i| {
            let cut = (i * 997) % REPAIR_VALUE_BYTES;
            let mut bytes = Vec::with_capacity(REPAIR_VALUE_BYTES);
            bytes.extend_from_slice(&pattern[cut..]);
            bytes.extend_from_slice(&pattern[..cut]);
            let ts = Timestamp::new(((i as u64) + 1) << 16, 91);
            value_to_pb(&Value::Lww(Lww::new(ts, bytes.into())))
        })
        .collect()
}

/// The keys (indexes) `node` itself does not hold with its value `values[i]`: read at the
/// worker that stores each (a worker's own port never forwards).
fn not_held_right(node: &NodeProc, keys: &[String], values: &[pb::Value]) -> Vec<usize> {
    let index: HashMap<&str, usize> = keys.iter().map(String::as_str).zip(0..).collect();
    let mut right: BTreeSet<usize> = BTreeSet::new();
    for (worker, mine) in holders(&[node], keys) {
        let mut c = Native::connect(worker.parse().unwrap());
        let mine: Vec<&String> = mine.iter().collect();
        for chunk in mine.chunks(20) {
            let resp = c.call(Op::GetMany(pb::GetMany {
                keys: chunk.iter().map(|k| (*k).clone().into()).collect(),
                ..Default::default()
            }));
            let Some(R::Multi(m)) = resp.result else {
                panic!("GetMany at {worker}: {resp:?}")
            };
            for (k, r) in chunk.iter().zip(m.results) {
                let i = index[k.as_str()];
                if matches!(r.result,
                    Some(pb::key_result::Result::Get(g)) if g.value.as_ref() == Some(&values[i]))
                {
                    right.insert(i);
                }
            }
        }
    }
    (0..keys.len()).filter(|i| !right.contains(i)).collect()
}

/// Two nodes at replication 2 hold about 120 MiB (100 KiB values); the second stops
/// (without leaving) and restarts empty under the same id before the failure timeout: the
/// rings (ids, worker counts, vnodes) of the first do not change and no hand-off runs, so
/// only anti-entropy can give it its keys back — the sessions the restarted node starts
/// with every other worker once it sees the rings, and the periodic ones (every 500 ms).
/// It ends up holding every key, with the same value as the first, each node read
/// directly. The size is `LATTICEKV_TEST_REPAIR_MIB` (default 120: about 10 s in a debug
/// build).
#[test]
fn a_replica_restarted_empty_is_repaired_by_anti_entropy() {
    let _serial = serial();
    let f = [
        "--workers",
        "2",
        "--cluster-gossip-ms",
        "100",
        "--failure-timeout-ms",
        "60000",
        "--anti-entropy-ms",
        "500",
        "--replication",
        "2",
        "--no-leave",
    ];
    let mut nodes = cluster(&["r1", "r2"], &f, &[]);
    let n = repair_mib() * (1 << 20) / REPAIR_VALUE_BYTES;
    let keys = keys("big", n);
    let values = big_values(n);
    let started = Instant::now();
    let mut c = Native::connect(nodes[0].native);
    for (b, chunk) in keys.chunks(40).enumerate() {
        let resp = c.call(Op::PutMany(pb::PutMany {
            puts: chunk
                .iter()
                .enumerate()
                .map(|(i, k)| pb::Put {
                    key: k.clone().into(),
                    value: Some(values[b * 40 + i].clone()),
                })
                .collect(),
        }));
        let Some(R::Multi(m)) = resp.result else {
            panic!("PutMany: {resp:?}")
        };
        assert!(
            m.results
                .iter()
                .all(|r| matches!(r.result, Some(pb::key_result::Result::Ack(_)))),
            "PutMany: {m:?}"
        );
    }
    let all: Vec<&NodeProc> = nodes.iter().collect();
    assert!(
        eventually(Duration::from_secs(60), || replica_counts(&all, &keys)
            .values()
            .all(|&n| n == 2)),
        "the writes did not reach both replicas"
    );
    eprintln!(
        "{n} values written and replicated in {:?}",
        started.elapsed()
    );

    let mut r2 = nodes.pop().unwrap();
    assert_eq!(r2.stop_with(common::SIGTERM), Some(0), "r2 stops cleanly");
    drop(r2);
    // No data directory: it comes back empty.
    let r2 = NodeProc::server("r2", Some(nodes[0].native), &f);
    let both = [&nodes[0], &r2];
    for node in both {
        assert!(
            eventually(Duration::from_secs(20), || alive_members(node) == 2),
            "{} does not see both nodes alive",
            node.native
        );
    }
    let restarted = Instant::now();
    let held_by_r2 = || {
        replica_counts(&[&r2], &keys)
            .values()
            .filter(|&&n| n == 1)
            .count()
    };
    let repaired = eventually(Duration::from_secs(60), || held_by_r2() == n);
    assert!(
        repaired,
        "r2 holds {} of {n} keys after a minute",
        held_by_r2()
    );
    eprintln!("repaired in {:?}", restarted.elapsed());
    for node in both {
        let bad = not_held_right(node, &keys, &values);
        assert!(
            bad.is_empty(),
            "{} lacks {} keys or holds another value, e.g. {:?}",
            node.native,
            bad.len(),
            bad.iter().take(5).map(|&i| &keys[i]).collect::<Vec<_>>()
        );
    }
}
