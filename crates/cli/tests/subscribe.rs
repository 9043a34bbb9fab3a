//! Subscriptions against real nodes: first pushes and the period, a write arriving by
//! gossip, unsubscribing, bad input, subscriptions freed with their connection, and keys
//! moving to another replica.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use client::{Client, Notification, Value};
// The tests of this file run one at a time (`serial`): they measure push timing, and one of
// them runs a cluster, whose heartbeats a busy 2-core machine would starve.
use common::{eventually, serial, Native, NodeProc};
use prost::Message;
use testkit::rt;
use wire::pb::{self, request::Op, response::Result as R, ErrorCode};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The bytes of an LWW value.
fn lww(v: &Option<Value>) -> Option<String> {
    match v {
        Some(Value::Lww(l)) => Some(String::from_utf8_lossy(&l.value).into_owned()),
        None => None,
        other => panic!("not an LWW value: {other:?}"),
    }
}

/// The bytes of an LWW value on the wire.
fn pb_lww(v: &Option<pb::Value>) -> Option<String> {
    match v.as_ref().and_then(|v| v.kind.as_ref()) {
        Some(pb::value::Kind::Lww(l)) => Some(String::from_utf8_lossy(&l.value).into_owned()),
        None => None,
        other => panic!("not an LWW value: {other:?}"),
    }
}

fn subscribe_op(keys: &[&str], period_ms: u32) -> Op {
    Op::Subscribe(pb::Subscribe {
        keys: keys.iter().map(|k| b(k)).collect(),
        period_ms,
        ..Default::default()
    })
}

fn assign_op(key: &str, value: &str) -> Op {
    Op::Update(pb::Update {
        key: b(key),
        op: Some(pb::update::Op::Assign(pb::update::Assign {
            value: b(value),
            condition: 0,
        })),
    })
}

/// Sends a request and reads frames up to its response; returns the response and the
/// pushes read before it.
fn call(c: &mut Native, op: Op) -> (pb::Response, Vec<pb::Notification>) {
    let id = c.next_id;
    c.next_id += 1;
    let mut out = Vec::new();
    let req = pb::Request {
        id,
        op: Some(op),
        ..Default::default()
    };
    wire::frame::encode(&req, &mut out);
    c.stream.write_all(&out).unwrap();
    let mut pushes = Vec::new();
    loop {
        let resp = c.read();
        match resp.result {
            Some(R::Notification(n)) if resp.id == 0 => pushes.push(n),
            _ => {
                assert_eq!(resp.id, id, "response id: {resp:?}");
                return (resp, pushes);
            }
        }
    }
}

/// Reads one push, or `None` if none arrives before `deadline`.
fn next_push(c: &mut Native, deadline: Instant) -> Option<pb::Notification> {
    let left = deadline.checked_duration_since(Instant::now())?;
    c.stream
        .set_read_timeout(Some(left.max(Duration::from_millis(1))))
        .unwrap();
    let mut header = [0u8; 4];
    let got = c.stream.read_exact(&mut header);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    match got {
        Ok(()) => {}
        Err(e)
            if e.kind() == std::io::ErrorKind::WouldBlock
                || e.kind() == std::io::ErrorKind::TimedOut =>
        {
            return None
        }
        Err(e) => panic!("reading a push: {e}"),
    }
    let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
    c.stream.read_exact(&mut body).unwrap();
    let resp = pb::Response::decode(&body[..]).unwrap();
    assert_eq!(resp.id, 0, "a push has id 0: {resp:?}");
    match resp.result {
        Some(R::Notification(n)) => Some(n),
        other => panic!("not a notification: {other:?}"),
    }
}

/// Every push arriving before `deadline`.
fn pushes_until(c: &mut Native, deadline: Instant) -> Vec<pb::Notification> {
    std::iter::from_fn(|| next_push(c, deadline)).collect()
}

/// Reads pushes until one for `key` satisfies `f`; panics after `timeout`.
fn wait_push(
    c: &mut Native,
    key: &str,
    timeout: Duration,
    f: impl Fn(&pb::Notification) -> bool,
) -> pb::Notification {
    let deadline = Instant::now() + timeout;
    while let Some(n) = next_push(c, deadline) {
        if n.key == key.as_bytes() && f(&n) {
            return n;
        }
    }
    panic!("no matching push for {key} within {timeout:?}")
}

/// The replica addresses of `key`, as `node` sees them.
fn replicas(node: SocketAddr, key: &str) -> Vec<SocketAddr> {
    let mut c = Native::connect(node);
    match c.call(Op::Locate(pb::Locate { keys: vec![b(key)] })).result {
        Some(R::Locations(l)) => l.keys[0]
            .replicas
            .iter()
            .map(|a| a.parse().unwrap())
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// Keys subscribed on the node, summed over its workers.
fn subscriptions(node: SocketAddr) -> u64 {
    let mut c = Native::connect(node);
    match c.call(Op::Status(pb::GetStatus {})).result {
        Some(R::Status(s)) => s.workers.iter().map(|w| w.subscriptions).sum(),
        other => panic!("{other:?}"),
    }
}

fn error_code(resp: &pb::Response) -> ErrorCode {
    match &resp.result {
        Some(R::Error(e)) => ErrorCode::try_from(e.code).unwrap(),
        other => panic!("expected an error, got {other:?}"),
    }
}

async fn next(sub: &mut client::Subscription, timeout: Duration) -> Option<Notification> {
    match tokio::time::timeout(timeout, sub.next()).await {
        Ok(Some(n)) => Some(n),
        Ok(None) => panic!("the subscription ended"),
        Err(_) => None,
    }
}

#[test]
fn first_values_then_the_latest_at_most_once_per_period() {
    let _serial = serial();
    let node = NodeProc::start(&["--workers", "2"]);
    rt().block_on(async {
        let c = Client::connect(&node.native.to_string()).await.unwrap();
        c.assign("a", "a0").await.unwrap();
        c.assign("b", "b0").await.unwrap();
        let period = Duration::from_millis(200);
        let mut sub = c.subscribe(["a", "b", "c"], period).await.unwrap();
        let mut first: HashMap<String, Option<String>> = HashMap::new();
        while first.len() < 3 {
            let n = next(&mut sub, Duration::from_secs(5))
                .await
                .expect("a first push for every key");
            let key = String::from_utf8(n.key.to_vec()).unwrap();
            assert!(
                first.insert(key, lww(&n.value)).is_none(),
                "one first push per key"
            );
        }
        assert_eq!(first["a"].as_deref(), Some("a0"));
        assert_eq!(first["b"].as_deref(), Some("b0"));
        assert_eq!(first["c"], None, "an absent key is pushed as absent");

        // Ten writes of `a` over about half a second, read as they come.
        let writer = {
            let c = c.clone();
            tokio::spawn(async move {
                for i in 1..=10 {
                    c.assign("a", format!("a{i}")).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        let started = Instant::now();
        let mut a_times = Vec::new();
        let mut last_a = None;
        let mut others = Vec::new();
        while let Some(n) = next(&mut sub, Duration::from_millis(1000)).await {
            if &n.key[..] == b"a" {
                a_times.push(Instant::now());
                last_a = lww(&n.value);
            } else {
                others.push(n);
            }
        }
        writer.await.unwrap();
        assert_eq!(last_a.as_deref(), Some("a10"), "the latest value arrives");
        assert!(
            others.is_empty(),
            "keys not written get no push: {others:?}"
        );
        let window = *a_times.last().unwrap() - started;
        let bound = window.as_millis() / period.as_millis() + 2;
        assert!(
            a_times.len() >= 2 && a_times.len() as u128 <= bound,
            "{} pushes of `a` within {window:?} (at most {bound})",
            a_times.len()
        );
        for pair in a_times.windows(2) {
            assert!(
                pair[1] - pair[0] >= period / 2,
                "pushes {:?} apart, period {period:?}",
                pair[1] - pair[0]
            );
        }
    });
}

#[test]
fn a_write_arriving_by_gossip_is_pushed() {
    let _serial = serial();
    let flags = [
        "--workers",
        "2",
        "--failure-timeout-ms",
        "2000",
        "--cluster-gossip-ms",
        "100",
        "--replication",
        "2",
    ];
    let n1 = NodeProc::server("n1", None, &flags);
    let n2 = NodeProc::server("n2", Some(n1.native), &flags);
    for node in [&n1, &n2] {
        assert!(
            eventually(Duration::from_secs(20), || {
                replicas(node.native, "g").len() == 2
            }),
            "both nodes hold the key"
        );
    }
    let on = |node: &NodeProc| {
        *replicas(node.native, "g")
            .iter()
            .find(|a| node.workers.contains(a))
            .expect("a replica on the node")
    };
    let (at1, at2) = (on(&n1), on(&n2));
    let mut writer = Native::connect(at1);
    assert!(matches!(
        call(&mut writer, assign_op("g", "one")).0.result,
        Some(R::Ack(_))
    ));
    let mut sub = Native::connect(at2);
    let (resp, _) = call(&mut sub, subscribe_op(&["g"], 50));
    assert!(
        matches!(resp.result, Some(R::Ack(pb::Ack { count: 1 }))),
        "{resp:?}"
    );
    wait_push(&mut sub, "g", Duration::from_secs(10), |n| {
        pb_lww(&n.value).as_deref() == Some("one")
    });
    // A write at the other node's replica reaches this one by gossip, and is pushed.
    call(&mut writer, assign_op("g", "two"));
    let n = wait_push(&mut sub, "g", Duration::from_secs(10), |n| {
        pb_lww(&n.value).as_deref() == Some("two")
    });
    assert!(!n.moved);
    assert_ne!(n.version, 0);
}

#[test]
fn unsubscribe_stops_pushes() {
    let _serial = serial();
    let node = NodeProc::start(&["--workers", "1"]);
    let worker = node.workers[0];
    let mut c = Native::connect(worker);
    let (resp, _) = call(&mut c, subscribe_op(&["x", "y"], 50));
    assert!(
        matches!(resp.result, Some(R::Ack(pb::Ack { count: 2 }))),
        "{resp:?}"
    );
    let first = pushes_until(&mut c, Instant::now() + Duration::from_millis(300));
    assert_eq!(first.len(), 2, "{first:?}");
    let (resp, _) = call(
        &mut c,
        Op::Unsubscribe(pb::Unsubscribe {
            keys: vec![b("x"), b("never subscribed")],
        }),
    );
    assert!(
        matches!(resp.result, Some(R::Ack(pb::Ack { count: 1 }))),
        "one subscription ended: {resp:?}"
    );
    let (_, mut pushes) = call(&mut c, assign_op("x", "new"));
    pushes.extend(call(&mut c, assign_op("y", "new")).1);
    pushes.extend(pushes_until(
        &mut c,
        Instant::now() + Duration::from_millis(600),
    ));
    assert!(
        pushes.iter().any(|n| n.key == "y".as_bytes()),
        "y is still subscribed: {pushes:?}"
    );
    assert!(
        pushes.iter().all(|n| n.key != "x".as_bytes()),
        "x is not: {pushes:?}"
    );

    // The Rust client: no notification for a key after its unsubscribe returns.
    rt().block_on(async {
        let client = Client::connect(&node.native.to_string()).await.unwrap();
        let mut sub = client
            .subscribe(["p", "q"], Duration::from_millis(20))
            .await
            .unwrap();
        for _ in 0..2 {
            next(&mut sub, Duration::from_secs(5)).await.expect("first");
        }
        sub.unsubscribe(["p"]).await.unwrap();
        assert_eq!(sub.keys().count(), 1);
        client.assign("p", "1").await.unwrap();
        client.assign("q", "1").await.unwrap();
        let n = next(&mut sub, Duration::from_secs(5))
            .await
            .expect("q's push");
        assert_eq!(&n.key[..], b"q");
        assert!(next(&mut sub, Duration::from_millis(300)).await.is_none());
        sub.unsubscribe(["q"]).await.unwrap();
        assert_eq!(sub.next().await, None, "no key left: the stream ends");
    });
}

#[test]
fn bad_subscriptions_get_clear_errors_and_the_connection_goes_on() {
    let _serial = serial();
    let node = NodeProc::start(&["--workers", "2"]);
    let home = replicas(node.native, "k")[0];
    let mut c = Native::connect(home);
    let big = "x".repeat(20_000);
    let (resp, _) = call(&mut c, subscribe_op(&["k", &big], 0));
    assert_eq!(error_code(&resp), ErrorCode::KeyTooLarge);
    let (resp, _) = call(&mut c, subscribe_op(&["\0lkv\0rep\0k"], 0));
    assert_eq!(error_code(&resp), ErrorCode::ReservedKey);
    let many: Vec<String> = (0..10_001).map(|i| format!("k{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let (resp, _) = call(&mut c, subscribe_op(&many, 0));
    assert_eq!(error_code(&resp), ErrorCode::InvalidArgument);
    let Some(R::Error(e)) = &resp.result else {
        unreachable!()
    };
    assert!(e.message.contains("10000"), "{}", e.message);
    // A key of the other worker: a redirect to it, nothing subscribed.
    let other = (0..1000)
        .map(|i| format!("o{i}"))
        .find(|k| replicas(node.native, k)[0] != home)
        .expect("a key of the other worker");
    let (resp, _) = call(&mut c, subscribe_op(&["k", &other], 0));
    assert_eq!(error_code(&resp), ErrorCode::Redirect);
    let Some(R::Error(e)) = &resp.result else {
        unreachable!()
    };
    assert_eq!(
        e.redirect,
        vec![replicas(node.native, &other)[0].to_string()]
    );
    assert_eq!(
        subscriptions(node.native),
        0,
        "failed requests subscribe nothing"
    );
    // The connection still serves.
    let (resp, _) = call(&mut c, Op::Get(pb::Get { key: b("k") }));
    assert!(matches!(resp.result, Some(R::Get(_))), "{resp:?}");
    let (resp, _) = call(&mut c, subscribe_op(&["k"], 0));
    assert!(
        matches!(resp.result, Some(R::Ack(pb::Ack { count: 1 }))),
        "{resp:?}"
    );

    // The Rust client reports the server's error.
    rt().block_on(async {
        let client = Client::connect(&node.native.to_string()).await.unwrap();
        let e = client
            .subscribe([big.as_str()], Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::KeyTooLarge), "{e}");
    });
}

#[test]
fn closing_the_connection_frees_its_subscriptions() {
    let _serial = serial();
    let node = NodeProc::start(&["--workers", "1"]);
    let mut c = Native::connect(node.workers[0]);
    let (resp, _) = call(&mut c, subscribe_op(&["a", "b", "c", "d", "e"], 0));
    assert!(
        matches!(resp.result, Some(R::Ack(pb::Ack { count: 5 }))),
        "{resp:?}"
    );
    assert_eq!(subscriptions(node.native), 5);
    drop(c);
    assert!(
        eventually(Duration::from_secs(5), || subscriptions(node.native) == 0),
        "a closed connection's subscriptions are dropped"
    );
    let out = node.cli_ok(&["status"]);
    assert!(out.contains("subscriptions"), "{out}");

    rt().block_on(async {
        let client = Client::connect(&node.native.to_string()).await.unwrap();
        let keys: Vec<String> = (0..20).map(|i| format!("s{i}")).collect();
        let sub = client
            .subscribe(&keys, Duration::from_millis(100))
            .await
            .unwrap();
        assert_eq!(client.status().await.unwrap().workers[0].subscriptions, 20);
        drop(sub);
        let mut freed = false;
        for _ in 0..250 {
            if client.status().await.unwrap().workers[0].subscriptions == 0 {
                freed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(freed, "dropping a Subscription closes its connections");
    });
}

#[test]
fn keys_that_move_are_subscribed_again_at_their_new_replica() {
    let _serial = serial();
    let node = NodeProc::start(&["--workers", "2"]);
    rt().block_on(async {
        let c = Client::connect(&node.native.to_string()).await.unwrap();
        // Replication changes keep the default disk replica: the disk node must be in.
        let mut joined = false;
        for _ in 0..200 {
            let t = c.refresh_topology().await.unwrap();
            if t.members.iter().any(|m| m.role == "disk" && m.status == 0) {
                joined = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(joined, "the disk node never joined");
        let keys: Vec<String> = (0..16).map(|i| format!("m{i}")).collect();
        for k in &keys {
            c.set_replication(k, 2).await.unwrap();
            c.assign(k, "before").await.unwrap();
        }
        // A raw subscription at the worker that will stop holding `m0`.
        let primary = replicas(node.native, "m0")[0];
        let other = *node.workers.iter().find(|w| **w != primary).unwrap();
        let mut raw = Native::connect(other);
        let (resp, _) = call(&mut raw, subscribe_op(&["m0"], 20));
        assert!(matches!(resp.result, Some(R::Ack(_))), "{resp:?}");
        wait_push(&mut raw, "m0", Duration::from_secs(5), |n| !n.moved);

        // Each key lands on one of its two replicas, at random: some of them on the worker
        // that loses them.
        let mut sub = c.subscribe(&keys, Duration::from_millis(20)).await.unwrap();
        // (A replica that just got the key may push it absent first, then its value once
        // replication brings it.)
        all_reach(&mut sub, keys.len(), "before").await;
        for k in &keys {
            c.set_replication(k, 1).await.unwrap();
        }
        let n = wait_push(&mut raw, "m0", Duration::from_secs(5), |n| n.moved);
        assert!(n.value.is_none());
        // `raw`'s m0 left the table; the client's keys are all subscribed (again). (Polled
        // without blocking: the subscription's task runs on this thread.)
        let mut count = 0;
        for _ in 0..250 {
            let status = c.status().await.unwrap();
            count = status.workers.iter().map(|w| w.subscriptions).sum::<u64>() as usize;
            if count == keys.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(count, keys.len(), "subscriptions on the node");
        for k in &keys {
            c.assign(k, "after").await.unwrap();
        }
        all_reach(&mut sub, keys.len(), "after").await;
    });
}

/// Reads notifications until each of `n` keys' latest value is `value`.
async fn all_reach(sub: &mut client::Subscription, n: usize, value: &str) {
    let mut latest: HashMap<Vec<u8>, Option<String>> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while latest
        .values()
        .filter(|v| v.as_deref() == Some(value))
        .count()
        < n
    {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(note) = next(sub, left).await else {
            panic!("not every key reached {value}: {latest:?}")
        };
        latest.insert(note.key.to_vec(), lww(&note.value));
    }
}

/// Keys that move to a node joining the cluster keep being pushed: the old replica says
/// `moved`, the client subscribes them again at the new node, and later writes arrive.
#[test]
fn subscriptions_follow_keys_to_a_joining_node() {
    let _serial = serial();
    let flags = [
        "--workers",
        "1",
        "--replication",
        "1",
        "--failure-timeout-ms",
        "5000",
        "--cluster-gossip-ms",
        "100",
    ];
    let n1 = NodeProc::server("n1", None, &flags);
    rt().block_on(async {
        let c = Client::connect(&n1.native.to_string()).await.unwrap();
        let keys: Vec<String> = (0..32).map(|i| format!("join{i}")).collect();
        for k in &keys {
            c.assign(k, "before").await.unwrap();
        }
        let mut sub = c.subscribe(&keys, Duration::from_millis(20)).await.unwrap();
        all_reach(&mut sub, keys.len(), "before").await;

        let n2 = NodeProc::server("n2", Some(n1.native), &flags);
        // Wait until the client's view has n2 and some keys live there.
        let mut moved = 0;
        for _ in 0..200 {
            c.refresh_topology().await.unwrap();
            let layout = c.layout();
            moved = keys
                .iter()
                .filter(|k| {
                    layout.addr_for(k.as_bytes()) == Some(n2.workers[0].to_string().as_str())
                })
                .count();
            if moved > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(moved > 0, "no key moved to the joining node");
        // Writes go to the keys' current owners; every key's new value is pushed, those on
        // n2 from n2.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut latest: HashMap<Vec<u8>, Option<String>> = HashMap::new();
        let mut round = 0;
        while latest
            .values()
            .filter(|v| v.as_deref() == Some("after"))
            .count()
            < keys.len()
        {
            assert!(
                Instant::now() < deadline,
                "not every key was pushed after the join: {latest:?}"
            );
            // Write again now and then: a write may land while the key is still being
            // handed off, and the hand-off then carries it.
            if round % 25 == 0 {
                for k in &keys {
                    c.assign(k, "after").await.unwrap();
                }
            }
            round += 1;
            if let Some(note) = next(&mut sub, Duration::from_millis(20)).await {
                latest.insert(note.key.to_vec(), lww(&note.value));
            }
        }
        drop(n2);
    });
}
