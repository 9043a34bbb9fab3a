//! Reads that miss while keys move: concurrent reads of a key share one fetch from its
//! previous replicas.

use std::sync::Arc;

use bytes::Bytes;
use lattice::{Lww, Record, Timestamp, Value};
use placement::{node_key, Replica};

use super::*;
use crate::clock::ManualClock;
use crate::config::Limits;
use crate::op::{Op, OpResult};
use crate::shard::Shard;
use crate::test_fixtures::{memory_view_of, shard_config};
use crate::view::ViewState;

fn view(nodes: &[&str], global: u32) -> Arc<ViewState> {
    memory_view_of(nodes, global)
}

#[test]
fn concurrent_reads_of_a_moving_key_share_one_fetch() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let me = Replica {
        node: node_key("b"),
        worker: 0,
    };
    let a = Replica {
        node: node_key("a"),
        worker: 0,
    };
    // Node b's worker knew a view of node a alone; in the new one every key is on both
    // nodes: until hand-off brings a's keys, reads of them miss here and ask a.
    let shard = Shard::new(
        shard_config(me, Limits::default()),
        view(&["a"], 1),
        7,
        clock.clone(),
    );
    let mut core = Core::new(shard, CoreConfig::default(), 7);
    core.set_view(view(&["a", "b"], 2));
    core.take_effects();
    assert!(core.shard().settling().is_some());

    let key = Bytes::from_static(b"hot");
    let mut tickets = Vec::new();
    for _ in 0..5 {
        match core.submit(
            vec![Op::Get { key: key.clone() }],
            crate::ack::Ack::MERGED,
            Routing::Forward,
        ) {
            Submitted::Pending(t) => tickets.push(t),
            Submitted::Done(r) => panic!("a read of a moving key answered at once: {r:?}"),
        }
    }
    let fetches: Vec<(ReqId, Replica)> = core
        .take_effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::Send {
                req,
                to,
                msg: PeerMsg::Fetch { keys },
                ..
            } => {
                assert_eq!(keys, vec![key.clone()]);
                Some((req, to))
            }
            _ => None,
        })
        .collect();
    assert_eq!(fetches.len(), 1, "one fetch per read: {fetches:?}");
    assert_eq!(fetches[0].1, a);

    // The record arrives: every read answers with it.
    let ts = Timestamp::new(5 << 16, 1);
    let record = Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(&b"v"[..])))));
    core.on_reply(
        fetches[0].0,
        Ok(PeerReply::Records(vec![(key.clone(), record.clone())])),
    );
    let mut answered = 0;
    for e in core.take_effects() {
        if let Effect::Complete { ticket, results } = e {
            assert!(tickets.contains(&ticket));
            assert_eq!(results, vec![OpResult::Value(record.value.clone())]);
            answered += 1;
        }
    }
    assert_eq!(answered, 5);
}

/// The leave of issue 14: node a left, its keys are on their way to b. A read at b that
/// misses asks a — no longer in b's view, but in the previous one it settles from, and
/// serving its keys until its hand-off is done — rather than failing the fetch for want of
/// an address and reporting an existing key absent.
#[test]
fn a_read_that_misses_asks_the_previous_owner_that_left_the_view() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let me = Replica {
        node: node_key("b"),
        worker: 0,
    };
    let a = Replica {
        node: node_key("a"),
        worker: 0,
    };
    let before = view(&["a", "b"], 1);
    let shard = Shard::new(
        shard_config(me, Limits::default()),
        before.clone(),
        7,
        clock.clone(),
    );
    let mut core = Core::new(shard, CoreConfig::default(), 7);
    core.set_view(view(&["b"], 1));
    core.take_effects();
    assert!(core.shard().settling().is_some());

    let key = (0..)
        .map(|i| Bytes::from(format!("key:{i}")))
        .find(|k| before.replicas(k) == vec![a])
        .expect("a key of node a");
    let ticket = match core.submit(
        vec![Op::Get { key: key.clone() }],
        crate::ack::Ack::MERGED,
        Routing::Forward,
    ) {
        Submitted::Pending(t) => t,
        Submitted::Done(r) => panic!("a read of a moving key answered at once: {r:?}"),
    };
    let fetch = core
        .take_effects()
        .into_iter()
        .find_map(|e| match e {
            Effect::Send {
                req,
                to,
                peer,
                msg: PeerMsg::Fetch { .. },
            } => Some((req, to, peer)),
            _ => None,
        })
        .expect("a fetch from the previous owner");
    assert_eq!(fetch.1, a);
    assert_eq!(fetch.2.as_deref(), Some("a/peer"), "sent to a's address");

    let ts = Timestamp::new(5 << 16, 1);
    let record = Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(&b"v"[..])))));
    core.on_reply(fetch.0, Ok(PeerReply::Records(vec![(key, record.clone())])));
    let results = core.take_effects().into_iter().find_map(|e| match e {
        Effect::Complete { ticket: t, results } if t == ticket => Some(results),
        _ => None,
    });
    assert_eq!(results, Some(vec![OpResult::Value(record.value.clone())]));
}

/// A read forwarded by another worker (a front port, or the leaving node itself, routing
/// under its own view) is settled like a client's: at b, which misses while a's keys are on
/// their way, it asks a before answering, instead of answering that the key is absent.
#[test]
fn a_forwarded_read_that_misses_asks_the_previous_owner() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let me = Replica {
        node: node_key("b"),
        worker: 0,
    };
    let a = Replica {
        node: node_key("a"),
        worker: 0,
    };
    let before = view(&["a", "b"], 1);
    let shard = Shard::new(
        shard_config(me, Limits::default()),
        before.clone(),
        7,
        clock.clone(),
    );
    let mut core = Core::new(shard, CoreConfig::default(), 7);
    core.set_view(view(&["b"], 1));
    core.take_effects();

    let key = (0..)
        .map(|i| Bytes::from(format!("key:{i}")))
        .find(|k| before.replicas(k) == vec![a])
        .expect("a key of node a");
    let msg = PeerMsg::Forward {
        ops: vec![Op::Get { key: key.clone() }],
        ack: crate::ack::Ack::MERGED,
    };
    core.on_peer(a, msg, Token(1));
    let mut fetch = None;
    for e in core.take_effects() {
        match e {
            Effect::Send {
                req,
                to,
                msg: PeerMsg::Fetch { keys },
                ..
            } => {
                assert_eq!((to, keys), (a, vec![key.clone()]));
                fetch = Some(req);
            }
            Effect::Respond { result, .. } => {
                panic!("a forwarded read of a moving key answered at once: {result:?}")
            }
            _ => {}
        }
    }
    let fetch = fetch.expect("a fetch from the previous owner");

    let ts = Timestamp::new(5 << 16, 1);
    let record = Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(&b"v"[..])))));
    core.on_reply(fetch, Ok(PeerReply::Records(vec![(key, record.clone())])));
    let answer = core.take_effects().into_iter().find_map(|e| match e {
        Effect::Respond {
            token: Token(1),
            result,
        } => Some(result),
        _ => None,
    });
    match answer {
        Some(Ok(PeerReply::Results(results))) => {
            assert_eq!(results, vec![OpResult::Value(record.value.clone())])
        }
        other => panic!("answered {other:?}"),
    }
}

/// The leaving side: node a left and handed its keys to b, but a worker whose view is older
/// still forwards reads of them to a. A read that misses at a, which no longer replicates
/// the key under its view, asks b (the key's replica under a's view) and answers with what
/// b holds — without keeping it — instead of answering that the key is absent.
#[test]
fn a_forwarded_read_that_misses_at_a_worker_that_handed_the_key_off_asks_its_replicas() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let me = Replica {
        node: node_key("a"),
        worker: 0,
    };
    let b = Replica {
        node: node_key("b"),
        worker: 0,
    };
    let c = Replica {
        node: node_key("c"),
        worker: 0,
    };
    let before = view(&["a", "b"], 1);
    let shard = Shard::new(
        shard_config(me, Limits::default()),
        before.clone(),
        7,
        clock.clone(),
    );
    let mut core = Core::new(shard, CoreConfig::default(), 7);
    core.set_view(view(&["b"], 1));
    core.take_effects();

    let key = (0..)
        .map(|i| Bytes::from(format!("key:{i}")))
        .find(|k| before.replicas(k) == vec![me])
        .expect("a key of node a");
    let msg = PeerMsg::Forward {
        ops: vec![Op::Get { key: key.clone() }],
        ack: crate::ack::Ack::MERGED,
    };
    core.on_peer(c, msg, Token(1));
    let mut fetch = None;
    for e in core.take_effects() {
        match e {
            Effect::Send {
                req,
                to,
                peer,
                msg: PeerMsg::Fetch { keys },
            } => {
                assert_eq!((to, keys), (b, vec![key.clone()]));
                assert_eq!(peer.as_deref(), Some("b/peer"));
                fetch = Some(req);
            }
            Effect::Respond { result, .. } => {
                panic!("a forwarded read of a key handed off answered at once: {result:?}")
            }
            _ => {}
        }
    }
    let fetch = fetch.expect("a fetch from the key's replica");

    let ts = Timestamp::new(5 << 16, 1);
    let record = Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(&b"v"[..])))));
    core.on_reply(
        fetch,
        Ok(PeerReply::Records(vec![(key.clone(), record.clone())])),
    );
    let answer = core.take_effects().into_iter().find_map(|e| match e {
        Effect::Respond {
            token: Token(1),
            result,
        } => Some(result),
        _ => None,
    });
    match answer {
        Some(Ok(PeerReply::Results(results))) => {
            assert_eq!(results, vec![OpResult::Value(record.value.clone())])
        }
        other => panic!("answered {other:?}"),
    }
    assert!(
        core.shard().store().get(&key).is_none(),
        "a worker that does not replicate the key does not keep it"
    );
}
