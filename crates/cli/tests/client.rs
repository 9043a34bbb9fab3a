//! The Rust client against a real node: typed calls for every lattice type, multi-key calls
//! spread over workers, concurrent pipelined use, and errors as values.

mod common;

use client::{Client, ClientError, Condition};
use common::NodeProc;
use lattice::{Bool, Lattice, Lww, Map, Max, Priority, Set, SingleKeyCausal, Timestamp, Value};
use testkit::rt;
use wire::pb::ErrorCode;

#[test]
fn typed_calls_round_trip() {
    let node = NodeProc::start(&["--workers", "2"]);
    rt().block_on(async {
        let c = Client::connect(&node.native.to_string()).await.unwrap();
        assert_eq!(c.layout().workers.len(), 2);

        c.assign("k", "v1").await.unwrap();
        assert_eq!(c.get_lww("k").await.unwrap().as_deref(), Some(&b"v1"[..]));
        assert!(!c.assign_if("k", "v2", Condition::IfAbsent).await.unwrap());
        assert!(c.assign_if("k", "v3", Condition::IfPresent).await.unwrap());
        assert_eq!(c.get_lww("k").await.unwrap().as_deref(), Some(&b"v3"[..]));

        assert_eq!(c.counter_add("n", 5).await.unwrap(), 5);
        assert_eq!(c.counter_add("n", -7).await.unwrap(), -2);
        assert_eq!(c.counter_get("n").await.unwrap(), -2);

        assert_eq!(c.set_add("s", ["a", "b", "a"]).await.unwrap(), 2);
        assert_eq!(c.set_remove("s", ["a", "zz"]).await.unwrap(), 1);
        assert_eq!(
            c.set_members("s").await.unwrap(),
            vec![Box::from(&b"b"[..])]
        );

        // Generic lattice values merge on the server.
        c.put("max", Value::Max(Max(3))).await.unwrap();
        c.put("max", Value::Max(Max(1))).await.unwrap();
        assert_eq!(c.get("max").await.unwrap(), Some(Value::Max(Max(3))));
        c.put("flag", Value::Bool(Bool(true))).await.unwrap();
        let p = |p: f64, v: &[u8]| {
            Value::Priority(Priority {
                priority: p,
                value: v.into(),
            })
        };
        c.put("prio", p(2.0, b"b")).await.unwrap();
        c.put("prio", p(1.0, b"a")).await.unwrap();
        assert_eq!(c.get("prio").await.unwrap(), Some(p(1.0, b"a")));
        let set = |m: &[&[u8]]| Value::Set(m.iter().map(|x| Box::from(*x)).collect::<Set<_>>());
        c.put("grow", set(&[b"x"])).await.unwrap();
        c.put("grow", set(&[b"y"])).await.unwrap();
        assert_eq!(c.get("grow").await.unwrap(), Some(set(&[b"x", b"y"])));
        let mut map: Map<Box<[u8]>, Value> = Map::new();
        map.insert_merge(b"hits".to_vec().into(), Value::Max(Max(7)));
        c.put("map", Value::Map(map.clone())).await.unwrap();
        assert_eq!(c.get("map").await.unwrap(), Some(Value::Map(map)));
        // An explicit LWW value with a client timestamp.
        let ts = Timestamp::new(1 << 40, 42);
        c.put("lww", Value::Lww(Lww::new(ts, b"client".to_vec().into())))
            .await
            .unwrap();
        assert_eq!(
            c.get_lww("lww").await.unwrap().as_deref(),
            Some(&b"client"[..])
        );
        // Concurrent causal writes are kept as siblings.
        let mut w1 = lattice::CausalWriter::new(1);
        let mut w2 = lattice::CausalWriter::new(2);
        let empty = lattice::VectorClock::new();
        let a = SingleKeyCausal::new(w1.next_clock(&empty), b"a".to_vec().into());
        let b = SingleKeyCausal::new(w2.next_clock(&empty), b"b".to_vec().into());
        c.put("doc", Value::SingleKeyCausal(a.clone()))
            .await
            .unwrap();
        c.put("doc", Value::SingleKeyCausal(b.clone()))
            .await
            .unwrap();
        let mut expected = a;
        expected.merge(b);
        assert_eq!(
            c.get("doc").await.unwrap(),
            Some(Value::SingleKeyCausal(expected))
        );

        assert!(c.delete("k").await.unwrap());
        assert!(!c.delete("k").await.unwrap());
        assert_eq!(c.get("k").await.unwrap(), None);
    });
}

#[test]
fn errors_are_typed() {
    let node = NodeProc::start(&["--workers", "2"]);
    rt().block_on(async {
        let c = Client::connect(&node.native.to_string()).await.unwrap();
        c.counter_add("n", 1).await.unwrap();
        let e = c.assign("n", "x").await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::WrongType), "{e}");
        assert!(!e.is_retryable());
        let e = c.get_lww("n").await.unwrap_err();
        assert!(matches!(e, ClientError::UnexpectedType { .. }), "{e}");
        let e = c.counter_add("n", i64::MAX).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::Overflow));
        let e = c.get(vec![b'x'; 20_000]).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::KeyTooLarge));
        let e = c.set_replication("k", 0).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::InvalidArgument));
        // The client still works after every error.
        assert_eq!(c.counter_get("n").await.unwrap(), 1);
    });
}

#[test]
fn multi_key_calls_and_concurrent_use() {
    let node = NodeProc::start(&["--workers", "2"]);
    rt().block_on(async {
        let c = Client::connect(&node.native.to_string()).await.unwrap();
        let items: Vec<(String, Value)> = (0..500)
            .map(|i| {
                let ts = Timestamp::new((i + 1) << 16, 7);
                (
                    format!("key:{i}"),
                    Value::Lww(Lww::new(ts, i.to_string().into_bytes().into())),
                )
            })
            .collect();
        c.put_many(&items).await.unwrap();
        let mut keys: Vec<String> = items.iter().map(|(k, _)| k.clone()).collect();
        keys.push("missing".into());
        let values = c.get_many(&keys).await.unwrap();
        assert_eq!(values.len(), 501);
        for (i, v) in values.iter().take(500).enumerate() {
            assert_eq!(v.as_ref(), Some(&items[i].1));
        }
        assert_eq!(values[500], None);

        // Many tasks share the client's pipelined connections.
        let tasks: Vec<_> = (0..50)
            .map(|t| {
                let c = c.clone();
                tokio::spawn(async move {
                    for i in 0..40 {
                        c.counter_add(format!("ctr:{}", i % 10), 1).await.unwrap();
                    }
                    t
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let mut total = 0;
        for i in 0..10 {
            total += c.counter_get(format!("ctr:{i}")).await.unwrap();
        }
        assert_eq!(total, 50 * 40);
        let status = c.status().await.unwrap();
        assert_eq!(status.workers.len(), 2);
        assert!(status.workers.iter().all(|w| w.keys > 100), "{status:?}");
    });
}

#[test]
fn get_delta_answers_only_when_the_value_changed() {
    use client::Delta;
    let node = NodeProc::start(&["--workers", "2"]);
    rt().block_on(async {
        let c = Client::connect(&node.native.to_string()).await.unwrap();
        assert_eq!(
            c.get_delta("nothing", 0).await.unwrap(),
            Delta::Unchanged,
            "no value and no version: nothing changed"
        );
        c.set_add("tags", ["a"]).await.unwrap();
        let Delta::Changed { value, version } = c.get_delta("tags", 0).await.unwrap() else {
            panic!("a new key is a change")
        };
        assert!(matches!(value, Some(Value::OrSet(_))));
        assert_ne!(version, 0);
        assert_eq!(
            c.get_delta("tags", version).await.unwrap(),
            Delta::Unchanged
        );
        c.set_add("tags", ["b"]).await.unwrap();
        let Delta::Changed { version: v2, .. } = c.get_delta("tags", version).await.unwrap() else {
            panic!("a write is a change")
        };
        assert_ne!(v2, version);
        assert_eq!(c.get_delta("tags", v2).await.unwrap(), Delta::Unchanged);
        // A deleted key: changed, no value.
        c.delete("tags").await.unwrap();
        assert_eq!(
            c.get_delta("tags", v2).await.unwrap(),
            Delta::Changed {
                value: None,
                version: 0
            }
        );
    });
}
