//! What the causal cache and its dependency GC move over the network for large values:
//! the GC's sample of a replica carries the causal metadata and no payload, and a cache
//! miss moves the value once (the subscription that follows does not push it again).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use faas::data::DataPlane;
use faas::hydro::{CacheConfig, CausalCache};
use lattice::{CausalVersion, Lww, MultiKeyCausal, Timestamp, Value, VectorClock};
use prost::Message;
use testkit::rt;
use testkit::NodeProc;

const BIG: usize = 1 << 20;

fn store() -> NodeProc {
    NodeProc::start_bin(
        env!("CARGO_BIN_EXE_latticekv"),
        &["--workers", "2", "--disk-nodes", "0", "--monitor", "false"],
    )
}

fn clock(entries: &[(u64, u64)]) -> VectorClock {
    entries.iter().copied().collect()
}

fn causal(c: &[(u64, u64)], deps: &[(&str, &[(u64, u64)])], payload: Vec<u8>) -> Value {
    let deps: BTreeMap<lattice::Blob, VectorClock> = deps
        .iter()
        .map(|(k, c)| (lattice::Blob::from(k.as_bytes()), clock(c)))
        .collect();
    Value::MultiKeyCausal(MultiKeyCausal::new(CausalVersion {
        clock: clock(c),
        deps,
        value: payload.into_boxed_slice(),
    }))
}

/// The encoded size of a value as it travels.
fn wire_len(v: &Value) -> usize {
    wire::convert::value_to_pb(v).encoded_len()
}

#[test]
fn a_metadata_read_of_every_replica_carries_clocks_and_deps_without_the_payload() {
    let node = store();
    rt().block_on(async {
        let c = client::Client::connect(&node.native.to_string())
            .await
            .unwrap();
        let full = causal(&[(1, 3), (2, 1)], &[("dep", &[(1, 2)])], vec![7u8; BIG]);
        let lww = Value::Lww(Lww::new(Timestamp::new(42, 1), vec![9u8; BIG].into()));
        c.put("big", full.clone()).await.unwrap();
        c.put("reg", lww.clone()).await.unwrap();
        let layout = c.layout();
        for key in ["big", "reg"] {
            let replicas = layout.replicas(key.as_bytes());
            assert!(!replicas.is_empty());
            for rep in replicas {
                let addr = layout.addr(rep).unwrap().to_string();
                let meta = c.get_many_meta_at(&addr, &[key]).await.unwrap();
                let meta = meta.into_iter().next().unwrap().unwrap().unwrap();
                // The answer does not grow with the value: a 1 MiB payload, a few bytes.
                assert!(wire_len(&meta) < 100, "{key}: {} bytes", wire_len(&meta));
                match (&meta, key) {
                    (Value::MultiKeyCausal(m), "big") => {
                        let Value::MultiKeyCausal(f) = &full else {
                            unreachable!()
                        };
                        assert_eq!(m.clock(), f.clock());
                        assert_eq!(m.deps(), f.deps());
                        assert!(m.versions().iter().all(|v| v.value.is_empty()));
                    }
                    (Value::Lww(l), "reg") => {
                        let Value::Lww(f) = &lww else { unreachable!() };
                        assert_eq!(l.ts, f.ts);
                        assert!(l.value.is_empty());
                    }
                    other => panic!("unexpected answer {other:?}"),
                }
                // The full read at the same replica still carries the payload.
                let whole = c.get_many_at(&addr, &[key]).await.unwrap();
                let whole = whole.into_iter().next().unwrap().unwrap().unwrap();
                assert!(wire_len(&whole) > BIG);
            }
        }
    });
}

/// Polls `cond` every 5 ms for up to 20 s (the cache's state has no event to await).
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..4000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for {what}");
}

#[test]
fn a_miss_of_a_large_value_moves_it_once() {
    let node = store();
    rt().block_on(async {
        let c = client::Client::connect(&node.native.to_string())
            .await
            .unwrap();
        c.put("big", causal(&[(1, 1)], &[], vec![1u8; BIG]))
            .await
            .unwrap();
        let cache = CausalCache::start(
            c.clone(),
            CacheConfig {
                refresh_period: Duration::from_millis(10),
                ..Default::default()
            },
        );
        let read = cache
            .snapshot(1, vec![Bytes::from_static(b"big")])
            .await
            .unwrap();
        cache.release(1);
        assert_eq!(read[0].values[0].len(), BIG);
        assert_eq!(cache.stats().misses, 1);
        until("the subscription", || cache.stats().subscribed == 1).await;
        // A newer version: its push is the first one the cache should see. Had the
        // subscription pushed the value the miss read, that push came first (the store
        // pushes a key's current value right after the subscription's answer, on the
        // connection the later push uses too).
        c.put("big", causal(&[(1, 2)], &[], vec![2u8; 16]))
            .await
            .unwrap();
        for attempt in 0.. {
            assert!(attempt < 4000, "the new version never reached the cache");
            let now = cache
                .snapshot(2, vec![Bytes::from_static(b"big")])
                .await
                .unwrap();
            cache.release(2);
            if now[0].values[0].len() == 16 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let s = cache.stats();
        assert_eq!(s.misses, 1, "the new version came by the subscription");
        assert_eq!(
            s.pushes, 1,
            "one push merged: the new version, not the value the miss had read"
        );
    });
}
