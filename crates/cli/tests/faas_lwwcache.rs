//! The LWW-with-cache data plane (`--data-plane lww-cache`, the paper's LWW baseline)
//! against a real store: reads served from the host's cache until the refresh period
//! passes, then from the store; writes stored as LWW values and read back on the host.

use std::time::Duration;

use bytes::Bytes;
use faas::data::DataPlane;
use faas::lwwcache::{LwwCache, LwwCacheConfig};
use faas::pb;
use testkit::NodeProc;

fn store() -> NodeProc {
    NodeProc::start_bin(
        env!("CARGO_BIN_EXE_latticekv"),
        &["--workers", "2", "--disk-nodes", "0", "--monitor", "false"],
    )
}

async fn read(cache: &LwwCache, key: &str) -> Vec<Bytes> {
    let r = cache
        .snapshot(0, vec![Bytes::from(key.to_string())])
        .await
        .unwrap();
    assert_eq!(r.len(), 1);
    r[0].values.clone()
}

#[tokio::test]
async fn reads_come_from_the_cache_until_the_refresh_period_passes() {
    let node = store();
    let client = client::Client::connect(&node.native.to_string())
        .await
        .unwrap();
    client.assign("k", "v1").await.unwrap();
    let config = |refresh| LwwCacheConfig {
        refresh,
        ..LwwCacheConfig::default()
    };
    let slow = LwwCache::new(client.clone(), config(Duration::from_secs(3600)));
    let fast = LwwCache::new(client.clone(), config(Duration::from_millis(1)));
    assert_eq!(read(&slow, "k").await, vec![Bytes::from("v1")]);
    assert_eq!(read(&fast, "k").await, vec![Bytes::from("v1")]);
    assert!(read(&slow, "absent").await.is_empty());

    client.assign("k", "v2").await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await; // past `fast`'s refresh period
    assert_eq!(
        read(&slow, "k").await,
        vec![Bytes::from("v1")],
        "a cache hit"
    );
    assert_eq!(
        read(&fast, "k").await,
        vec![Bytes::from("v2")],
        "read again"
    );
    let s = slow.stats();
    assert_eq!((s.hits, s.misses, s.keys), (1, 2, 2), "{s:?}");

    // Writes go to the store as LWW values, and into the writer's cache.
    slow.commit(
        0,
        vec![pb::Write {
            key: Bytes::from("k"),
            value: Bytes::from("v3"),
        }],
    )
    .await
    .unwrap();
    assert_eq!(
        client.get_lww("k").await.unwrap().as_deref(),
        Some(&b"v3"[..])
    );
    assert_eq!(read(&slow, "k").await, vec![Bytes::from("v3")]);
    assert_eq!(slow.stats().misses, 2, "read-your-writes from the cache");
}
