//! The peer plane seen from outside, with real `latticekv server` processes on 127.0.0.1
//! (free ports): client ports refusing peer-plane messages, and tombstone reclamation (a
//! peer-plane exchange) followed by new writes.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

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
