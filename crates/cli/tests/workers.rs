//! Shard-per-core: keys spread over the workers, worker ports redirect keys they don't hold,
//! and a key replicated on both workers converges by gossip.

mod common;

use std::time::Duration;

use common::{eventually, Native, NodeProc, Resp};
use wire::pb::{self, request::Op, response::Result as R};

fn keys_per_worker(node: &NodeProc) -> Vec<u64> {
    let status = node.cli_ok(&["status"]);
    // The workers table: its lines after the header, up to the blank line (the statistics
    // table below lists the workers again).
    status
        .lines()
        .skip_while(|l| !l.starts_with("worker  address"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn keys_spread_across_both_workers() {
    let node = NodeProc::start(&["--workers", "2"]);
    let mut c = Resp::connect(node.resp);
    for i in 0..1000 {
        c.roundtrip(&[b"SET", format!("user:{i}").as_bytes(), b"x"], b"+OK\r\n");
    }
    let counts = keys_per_worker(&node);
    assert_eq!(counts.len(), 2);
    assert_eq!(counts.iter().sum::<u64>(), 1000);
    for n in &counts {
        assert!(*n >= 350, "unbalanced spread {counts:?}");
    }
}

fn set_add(n: &mut Native, key: &str, member: &str) -> pb::Response {
    n.call(Op::Update(pb::Update {
        key: key.to_string().into(),
        op: Some(pb::update::Op::SetAdd(pb::update::SetAdd {
            members: vec![member.to_string().into()],
        })),
    }))
}

fn members(n: &mut Native, key: &str) -> Vec<Vec<u8>> {
    let resp = n.call(Op::Get(pb::Get {
        key: key.to_string().into(),
    }));
    let Some(R::Get(g)) = resp.result else {
        panic!("{resp:?}")
    };
    let Some(v) = g.value else { return Vec::new() };
    let value = wire::convert::value_from_pb(&v).unwrap();
    match value {
        lattice::Value::OrSet(s) => s.iter().map(|m| m.to_vec()).collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn worker_ports_redirect_keys_they_do_not_hold() {
    let node = NodeProc::start(&["--workers", "2"]);
    let (mut w0, mut w1) = (
        Native::connect(node.workers[0]),
        Native::connect(node.workers[1]),
    );
    let mut redirects = 0;
    for i in 0..20 {
        let key = format!("k{i}");
        let a = set_add(&mut w0, &key, "m");
        let b = n_get(&mut w1, &key);
        // Exactly one of the two workers holds each key.
        match (&a.result, &b.result) {
            (Some(R::Ack(_)), Some(R::Error(e))) | (Some(R::Error(e)), Some(R::Get(_))) => {
                assert_eq!(e.code, pb::ErrorCode::Redirect as i32);
                assert_eq!(e.redirect.len(), 1);
                redirects += 1;
            }
            other => panic!("key {key}: {other:?}"),
        }
    }
    assert_eq!(redirects, 20);
}

fn n_get(n: &mut Native, key: &str) -> pb::Response {
    n.call(Op::Get(pb::Get {
        key: key.to_string().into(),
    }))
}

#[test]
fn key_replicated_on_both_workers_converges_after_gossip() {
    let node = NodeProc::start(&["--workers", "2", "--gossip-period-ms", "50"]);
    assert_eq!(node.cli_ok(&["replicate", "hot", "--local", "2"]), "OK\n");
    let (mut w0, mut w1) = (
        Native::connect(node.workers[0]),
        Native::connect(node.workers[1]),
    );
    // Each worker accepts writes of the key (both are replicas): write a different member
    // on each, so only gossip can make them equal.
    let ok = |r: pb::Response| matches!(r.result, Some(R::Ack(_)));
    assert!(eventually(Duration::from_secs(5), || ok(set_add(
        &mut w0, "hot", "from-0"
    ))));
    assert!(eventually(Duration::from_secs(5), || ok(set_add(
        &mut w1, "hot", "from-1"
    ))));
    let both = vec![b"from-0".to_vec(), b"from-1".to_vec()];
    assert!(
        eventually(Duration::from_secs(5), || members(&mut w0, "hot") == both
            && members(&mut w1, "hot") == both),
        "replicas did not converge: {:?} vs {:?}",
        members(&mut w0, "hot"),
        members(&mut w1, "hot")
    );
    // A removal on one replica reaches the other too.
    let rm = Op::Update(pb::Update {
        key: "hot".into(),
        op: Some(pb::update::Op::SetRemove(pb::update::SetRemove {
            members: vec!["from-0".into()],
        })),
    });
    assert!(matches!(w1.call(rm).result, Some(R::Ack(a)) if a.count == 1));
    assert!(eventually(Duration::from_secs(5), || members(
        &mut w0, "hot"
    ) == vec![
        b"from-1".to_vec()
    ]));
    // The key counts once in DBSIZE although two workers hold it.
    let mut r = Resp::connect(node.resp);
    r.roundtrip(&[b"DBSIZE"], b":1\r\n");
}

#[test]
fn replication_factor_above_worker_count_is_refused() {
    let node = NodeProc::start(&["--workers", "2"]);
    let out = node.cli(&["replicate", "k", "--local", "3"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exceeds the node's 2 workers"));
}
