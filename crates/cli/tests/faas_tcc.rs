//! The TCC anomaly check end to end (issue 16): a real store process, a compute host with
//! its data plane (HydroCache, `CausalCache`, or the bare store, `DirectStore`), and a
//! randomized workload of linear 3-function DAGs run concurrently, while writers put
//! mutually dependent causal versions straight to the store.
//!
//! The host runs in the test's process (so the test picks its data plane and reads its
//! cache's counters); the scheduler and the executors are played by the test, as in
//! `crates/faas/tests/host.rs`: each executor "function" returns the `(key, clock, deps)`
//! metadata of every key it was given (`KeyRead::meta` with the cache; with the bare store,
//! the metadata writers embed in payloads, `cache::checker::embed`), passing its upstream's
//! along, and the sink writes one or two keys of the DAG's read set. Every request's read
//! set is checked with `cache::checker`: 0 anomalies with the cache; the bare store's rate
//! is printed (it is timing-dependent) and the checker is shown to flag a constructed
//! fractured read.

mod faas_common;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cache::checker::{self, extract, ReadMeta};
use cache::versionset::refs_of;
use cache::{CacheId, Executor, Key, MultiKeyCausal};
use faas::data::DataPlane;
use faas::host::HostConfig;
use faas::hydro::{causal_of, CacheConfig, CausalCache};
use faas::{conn, pb};
use lattice::Value;
use testkit::NodeProc;
use tokio::net::{TcpListener, TcpStream};

use faas_common::{commit_embedded, decode, encode, hlc_now, meta_of, Mode};
use testkit::rt;
use tokio::sync::oneshot;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_latticekv")
}

fn store() -> NodeProc {
    NodeProc::start_bin(
        bin(),
        &["--workers", "2", "--disk-nodes", "0", "--monitor", "false"],
    )
}

/// An executor played by the test. Every function returns its upstream's view plus
/// `(key, meta)` for its own key arguments; a function given the value `w:K1,K2` writes
/// those keys (with the bare store, with embedded metadata computed by its own writer).
async fn executor(addr: SocketAddr, id: u32, mode: Mode) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let hello = pb::FromExecutor {
        msg: Some(pb::from_executor::Msg::Hello(pb::ExecutorHello {
            id,
            pid: 0,
            shm_bytes: 0,
        })),
    };
    conn::write(&mut s, &hello).await.unwrap();
    let mut writer = Executor::new(0x5000_0000 + id, 1000);
    while let Ok(Some(pb::ToExecutor {
        msg: Some(pb::to_executor::Msg::Task(t)),
    })) = conn::read::<pb::ToExecutor, _>(&mut s).await
    {
        let mut out = Vec::new();
        let mut seen: BTreeMap<Key, ReadMeta> = BTreeMap::new();
        let mut to_write: Vec<Key> = Vec::new();
        for a in &t.args {
            match &a.kind {
                Some(pb::task_arg::Kind::Upstream(u)) => {
                    out.extend_from_slice(u);
                    for (k, m) in decode(u) {
                        seen.insert(k, m);
                    }
                }
                Some(pb::task_arg::Kind::Key(k)) => {
                    let m = meta_of(mode, k);
                    encode(&mut out, &k.key, &m);
                    seen.insert(Key::from(&k.key[..]), m);
                }
                Some(pb::task_arg::Kind::Value(v)) => {
                    if let Some(list) = v.strip_prefix(b"w:") {
                        to_write = list.split(|b| *b == b',').map(Key::from).collect();
                    }
                }
                None => {}
            }
        }
        let payload = format!("t{}", t.id).into_bytes();
        let writes = match mode {
            Mode::Cache => to_write
                .iter()
                .map(|k| pb::Write {
                    key: Bytes::copy_from_slice(k),
                    value: Bytes::from(payload.clone()),
                })
                .collect(),
            Mode::Direct if to_write.is_empty() => Vec::new(),
            Mode::Direct => commit_embedded(&mut writer, &seen, &to_write, &payload)
                .into_iter()
                .map(|(k, v)| pb::Write {
                    key: Bytes::copy_from_slice(&k),
                    value: Bytes::from(v),
                })
                .collect(),
        };
        let done = pb::FromExecutor {
            msg: Some(pb::from_executor::Msg::Done(pb::TaskDone {
                id: t.id,
                result: Some(pb::task_done::Result::Value(out.into())),
                writes,
                exception: Bytes::new(),
            })),
        };
        if conn::write(&mut s, &done).await.is_err() {
            return;
        }
    }
}

/// The scheduler's side of one host link, played by the test: sends runs, routes answers.
struct Link {
    out: tokio::sync::mpsc::Sender<pb::FromScheduler>,
    waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<pb::dag_done::Result>>>>,
    next: std::sync::atomic::AtomicU64,
}

impl Link {
    async fn accept(listener: TcpListener) -> Link {
        let (stream, _) = listener.accept().await.unwrap();
        let (mut r, mut w) = stream.into_split();
        let hello: pb::ToScheduler = conn::read(&mut r).await.unwrap().unwrap();
        assert!(matches!(
            hello.msg,
            Some(pb::to_scheduler::Msg::HostHello(_))
        ));
        let waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<pb::dag_done::Result>>>> =
            Arc::default();
        let routes = waiting.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = conn::read::<pb::ToScheduler, _>(&mut r).await {
                if let Some(pb::to_scheduler::Msg::DagDone(d)) = m.msg {
                    if let Some(tx) = routes.lock().unwrap().remove(&d.run_id) {
                        let _ = tx.send(d.result.unwrap());
                    }
                }
            }
        });
        let (out, mut rx) = tokio::sync::mpsc::channel::<pb::FromScheduler>(64);
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                if conn::write(&mut w, &m).await.is_err() {
                    return;
                }
            }
        });
        Link {
            out,
            waiting,
            next: 1.into(),
        }
    }

    /// Runs the linear DAG f1 → f2 → f3 with these key references per function and the
    /// sink writing `writes`; the sink's result.
    async fn run(&self, refs: [Vec<Key>; 3], writes: &[Key]) -> Result<Bytes, String> {
        let names = ["f1", "f2", "f3"];
        let run_id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut args: HashMap<String, pb::Args> = HashMap::new();
        for (f, keys) in names.iter().zip(refs) {
            let mut a: Vec<pb::Arg> = keys
                .into_iter()
                .map(|k| pb::Arg {
                    kind: Some(pb::arg::Kind::KeyRef(Bytes::copy_from_slice(&k))),
                })
                .collect();
            if *f == "f3" && !writes.is_empty() {
                let list: Vec<&[u8]> = writes.iter().map(|k| &k[..]).collect();
                let mut v = b"w:".to_vec();
                v.extend(list.join(&b','));
                a.push(pb::Arg {
                    kind: Some(pb::arg::Kind::Value(v.into())),
                });
            }
            args.insert(f.to_string(), pb::Args { args: a });
        }
        let run = pb::RunDag {
            run_id,
            dag: Some(pb::Dag {
                name: "line".into(),
                functions: names.iter().map(|s| s.to_string()).collect(),
                edges: vec![
                    pb::Edge {
                        from: "f1".into(),
                        to: "f2".into(),
                    },
                    pb::Edge {
                        from: "f2".into(),
                        to: "f3".into(),
                    },
                ],
            }),
            code: names
                .iter()
                .map(|n| (n.to_string(), Bytes::from_static(b"code")))
                .collect(),
            args: args.into_iter().collect(),
            protocol: pb::Protocol::Ct as i32,
            timeout_ms: 30_000,
            commit_marker: String::new(),
        };
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap().insert(run_id, tx);
        self.out
            .send(pb::FromScheduler {
                msg: Some(pb::from_scheduler::Msg::RunDag(run)),
            })
            .await
            .map_err(|e| e.to_string())?;
        match rx.await.map_err(|e| e.to_string())? {
            pb::dag_done::Result::Value(v) => Ok(v),
            pb::dag_done::Result::Error(e) => Err(format!("{e:?}")),
        }
    }
}

/// A host on `data`, its executors played by the test, and the link to it.
async fn host(
    data: Arc<dyn DataPlane>,
    executors: u32,
    mode: Mode,
) -> (Link, tokio::sync::watch::Sender<bool>) {
    let scheduler = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let free = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let executor_addr = free.local_addr().unwrap();
    drop(free);
    let mut config = HostConfig::new(scheduler.local_addr().unwrap().to_string());
    config.executors = 0; // no Python: the test's executors connect instead
    config.executor_listen = executor_addr;
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    tokio::spawn(faas::host::run(config, data, shutdown));
    let link = Link::accept(scheduler).await;
    for id in 0..executors {
        tokio::spawn(executor(executor_addr, id, mode));
    }
    (link, stop)
}

/// Zipf over `n` keys with exponent `s`.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        let w: Vec<f64> = (1..=n).map(|i| 1.0 / (i as f64).powf(s)).collect();
        let total: f64 = w.iter().sum();
        let mut acc = 0.0;
        Zipf(
            w.iter()
                .map(|x| {
                    acc += x / total;
                    acc
                })
                .collect(),
        )
    }

    fn key(&self, rng: &mut fastrand::Rng) -> Key {
        let x = rng.f64();
        let i = self
            .0
            .iter()
            .position(|c| x <= *c)
            .unwrap_or(self.0.len() - 1);
        Key::from(format!("tcc-{i}").into_bytes())
    }
}

/// A writer outside the DAGs: reads two keys, commits both as mutually dependent versions
/// with its own executor id, and puts them one at a time with a pause between (the bare
/// store exposes the gap; the cache must not).
async fn direct_writer(
    store: client::Client,
    mode: Mode,
    seed: u64,
    zipf: Arc<Zipf>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> u64 {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut writer = Executor::new(0x6000_0000 + seed as u32, 1000);
    let mut commits = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let a = zipf.key(&mut rng);
        let b = zipf.key(&mut rng);
        if a == b {
            continue;
        }
        let keys = [a.clone(), b.clone()];
        let values = store.get_many(&keys).await.unwrap();
        let payload = format!("w{seed}-{commits}").into_bytes();
        let mut order: Vec<(Key, Value)> = match mode {
            Mode::Cache => {
                let read_versions: BTreeMap<Key, MultiKeyCausal> = keys
                    .iter()
                    .zip(values)
                    .filter_map(|(k, v)| Some((k.clone(), causal_of(v?))))
                    .collect();
                let refs = refs_of(&read_versions, CacheId(0));
                let writes = keys
                    .iter()
                    .map(|k| (k.clone(), Box::from(&payload[..])))
                    .collect();
                writer
                    .commit(writes, &refs, &read_versions)
                    .unwrap()
                    .into_iter()
                    .map(|(k, v)| (k, Value::MultiKeyCausal(v)))
                    .collect()
            }
            Mode::Direct => {
                let mut reads = BTreeMap::new();
                for (k, v) in keys.iter().zip(values) {
                    if let Some(Value::Lww(l)) = v {
                        if let Ok((m, _)) = extract(&l.value) {
                            reads.insert(k.clone(), m);
                        }
                    }
                }
                let mut out = Vec::new();
                for (k, bytes) in commit_embedded(&mut writer, &reads, &keys, &payload) {
                    out.push((
                        k,
                        Value::Lww(lattice::Lww {
                            ts: lattice::Timestamp::new(hlc_now(), 0x6000 + seed),
                            value: bytes.into(),
                        }),
                    ));
                }
                out
            }
        };
        if rng.bool() {
            order.reverse();
        }
        for (i, (k, v)) in order.into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(rng.u64(1..4))).await;
            }
            store.put(&k, v).await.unwrap();
        }
        commits += 1;
        tokio::time::sleep(Duration::from_millis(rng.u64(0..3))).await;
    }
    commits
}

/// What one workload run measured.
#[derive(Debug, Default)]
struct Outcome {
    requests: usize,
    failed: usize,
    anomalous: usize,
    strict: usize,
    causal: usize,
    atomic: usize,
    /// Requests where some key read depends on another key of the same read set: the
    /// check had something to check.
    related: usize,
    writer_commits: u64,
}

/// Runs the workload: `clients` concurrent clients, `per_client` DAG requests each, and two
/// direct writers, against a host with data plane `mode`.
async fn workload(
    store: &NodeProc,
    mode: Mode,
    clients: usize,
    per_client: usize,
    seed: u64,
    capacity: usize,
) -> (Outcome, Option<Arc<CausalCache>>) {
    let client = client::Client::connect(&store.native.to_string())
        .await
        .unwrap();
    let mut cache = None;
    let data: Arc<dyn DataPlane> = match mode {
        Mode::Cache => {
            let c = CausalCache::start(
                client.clone(),
                CacheConfig {
                    slots: 4,
                    capacity,
                    refresh_period: Duration::from_millis(10),
                    ..Default::default()
                },
            );
            cache = Some(c.clone());
            c
        }
        Mode::Direct => Arc::new(faas::data::DirectStore::new(client.clone())),
    };
    let (link, _stop) = host(data, 4, mode).await;
    let link = Arc::new(link);
    // LKV_TCC_KEYS / LKV_TCC_ZIPF change the keyspace (default 8 keys, Zipf 1.0) to measure
    // other contention levels; the assertions hold at any.
    let env = |name: &str, default: f64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let zipf = Arc::new(Zipf::new(
        env("LKV_TCC_KEYS", 8.0) as usize,
        env("LKV_TCC_ZIPF", 1.0),
    ));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|i| {
            tokio::spawn(direct_writer(
                client.clone(),
                mode,
                seed * 10 + i,
                zipf.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (link, zipf) = (link.clone(), zipf.clone());
        let seed = seed * 1000 + c as u64;
        tasks.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut out = Vec::new();
            for _ in 0..per_client {
                let refs: [Vec<Key>; 3] = std::array::from_fn(|_| {
                    let n = rng.usize(1..=2);
                    let mut ks: Vec<Key> = (0..n).map(|_| zipf.key(&mut rng)).collect();
                    ks.dedup();
                    ks
                });
                let all: Vec<Key> = refs.iter().flatten().cloned().collect();
                let mut writes = vec![all[rng.usize(..all.len())].clone()];
                if rng.bool() {
                    let k = all[rng.usize(..all.len())].clone();
                    if !writes.contains(&k) {
                        writes.push(k);
                    }
                }
                out.push(link.run(refs, &writes).await);
            }
            out
        }));
    }
    let mut outcome = Outcome::default();
    for t in tasks {
        for r in t.await.unwrap() {
            outcome.requests += 1;
            let Ok(v) = r else {
                eprintln!("request failed: {r:?}");
                outcome.failed += 1;
                continue;
            };
            let reads: BTreeMap<Key, ReadMeta> = decode(&v).into_iter().collect();
            if reads
                .values()
                .any(|m| m.deps.keys().any(|d| reads.contains_key(d)))
            {
                outcome.related += 1;
            }
            let report = checker::check(&reads);
            if !report.is_clean() {
                outcome.anomalous += 1;
                outcome.strict += report.strict.len();
                outcome.causal += report.causal.len();
                outcome.atomic += report.atomic.len();
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        outcome.writer_commits += w.await.unwrap();
    }
    (outcome, cache)
}

#[test]
fn the_causal_cache_shows_no_anomaly_and_the_bare_store_does() {
    let store = store();
    let (cached, cache) = rt().block_on(workload(&store, Mode::Cache, 6, 40, 1, 64 << 20));
    let cache = cache.unwrap();
    eprintln!("HydroCache (CT): {cached:?}, cache {:?}", cache.stats());
    assert_eq!(cached.failed, 0, "{cached:?}");
    assert_eq!(
        cached.anomalous, 0,
        "anomalies with the causal cache: {cached:?}"
    );
    assert!(cached.writer_commits > 0);
    assert!(
        cached.related > cached.requests / 4,
        "most read sets relate their keys: {cached:?}"
    );
    cache.check().unwrap();
    let stats = cache.stats();
    assert!(
        stats.pushes > 0,
        "the cache was refreshed by its subscriptions: {stats:?}"
    );
    assert_eq!(
        stats.pinned_runs, 0,
        "every run released its pins: {stats:?}"
    );
    drop(cache);

    let bare_store = store_fresh();
    let (bare, _) = rt().block_on(workload(&bare_store, Mode::Direct, 6, 40, 2, 0));
    eprintln!(
        "bare store: {bare:?}: {:.1} % of requests anomalous",
        100.0 * bare.anomalous as f64 / bare.requests.max(1) as f64
    );
    assert_eq!(bare.failed, 0, "{bare:?}");
    // The rate depends on timing; what must hold is that the checker catches a fractured
    // read when there is one: x and y written by one commit, x seen new and y old.
    let mut w = Executor::new(7, 10);
    let v = w
        .commit(
            [
                (Key::from(&b"x"[..]), Box::from(&b"1"[..])),
                (Key::from(&b"y"[..]), Box::from(&b"1"[..])),
            ]
            .into_iter()
            .collect(),
            &Default::default(),
            &BTreeMap::new(),
        )
        .unwrap();
    let fractured: BTreeMap<Key, ReadMeta> = [
        (v[0].0.clone(), ReadMeta::of(&v[0].1)),
        (v[1].0.clone(), ReadMeta::default()),
    ]
    .into_iter()
    .collect();
    let report = checker::check(&fractured);
    assert!(
        !report.strict.is_empty() && !report.atomic.is_empty(),
        "{report:?}"
    );
}

fn store_fresh() -> NodeProc {
    store()
}

/// The clock a DAG reading `key` (through `link`) saw.
async fn clock_read(link: &Link, key: &Key) -> cache::VectorClock {
    let v = link
        .run([vec![key.clone()], vec![], vec![]], &[])
        .await
        .unwrap();
    decode(&v).remove(0).1.clock
}

#[test]
fn the_cache_reads_its_own_writes_and_is_refreshed_by_subscriptions() {
    let store = store();
    rt().block_on(async {
        let client = client::Client::connect(&store.native.to_string())
            .await
            .unwrap();
        let cache = CausalCache::start(
            client.clone(),
            CacheConfig {
                refresh_period: Duration::from_millis(10),
                ..Default::default()
            },
        );
        let (link, _stop) = host(cache.clone(), 2, Mode::Cache).await;
        let k = Key::from(&b"ryw"[..]);

        // Absent, then written by a DAG: the next DAG on this host sees the write at once.
        assert!(clock_read(&link, &k).await.is_empty());
        link.run([vec![k.clone()], vec![], vec![]], std::slice::from_ref(&k))
            .await
            .unwrap();
        let Some(Value::MultiKeyCausal(written)) = client.get(&k).await.unwrap() else {
            panic!("the sink's write is a multi-key causal version");
        };
        assert_eq!(clock_read(&link, &k).await, written.clock());

        // A writer elsewhere puts a newer version: a subscription brings it in.
        let mut other = Executor::new(0x7777, 100);
        let refs = refs_of(&[(k.clone(), written.clone())].into(), CacheId(0));
        let newer = other
            .commit(
                [(k.clone(), Box::from(&b"elsewhere"[..]))].into(),
                &refs,
                &[(k.clone(), written.clone())].into(),
            )
            .unwrap()
            .remove(0)
            .1;
        client
            .put(&k, Value::MultiKeyCausal(newer.clone()))
            .await
            .unwrap();
        let mut seen = cache::VectorClock::new();
        for _ in 0..200 {
            seen = clock_read(&link, &k).await;
            if seen == newer.clock() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(seen, newer.clock(), "the pushed version reached the cut");

        // An LWW key reads at its timestamp, and a newer LWW write supersedes it.
        let l = Key::from(&b"lww"[..]);
        client.assign(&l, b"a").await.unwrap();
        let first = clock_read(&link, &l).await;
        assert_eq!(first.iter().count(), 1);
        assert!(first.get(faas::hydro::LWW_ACTOR) > 0);
        client.assign(&l, b"b").await.unwrap();
        let mut later = first.clone();
        for _ in 0..200 {
            later = clock_read(&link, &l).await;
            if later != first {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            first.leq(&later) && later != first,
            "{first:?} then {later:?}"
        );

        cache.check().unwrap();
        let stats = cache.stats();
        assert_eq!(stats.pinned_runs, 0, "{stats:?}");
        assert_eq!(stats.subscribed, 2, "{stats:?}");
    });
}

#[test]
fn a_small_cache_evicts_and_unsubscribes() {
    let store = store();
    rt().block_on(async {
        let client = client::Client::connect(&store.native.to_string())
            .await
            .unwrap();
        // Room for about three of these keys.
        let cache = CausalCache::start(
            client.clone(),
            CacheConfig {
                capacity: 1_000,
                refresh_period: Duration::from_millis(10),
                ..Default::default()
            },
        );
        let (link, _stop) = host(cache.clone(), 2, Mode::Cache).await;
        let keys: Vec<Key> = (0..10)
            .map(|i| Key::from(format!("evict-{i}").into_bytes()))
            .collect();
        for k in &keys {
            client.assign(k, &[7u8; 200][..]).await.unwrap();
        }
        for k in &keys {
            assert!(!clock_read(&link, k).await.is_empty());
        }
        let stats = cache.stats();
        assert!(stats.evicted >= 6, "{stats:?}");
        assert!(stats.keys <= 3 && stats.bytes <= 1_000, "{stats:?}");
        cache.check().unwrap();
        // The refresh task drops the subscriptions of evicted keys.
        let mut subscribed = usize::MAX;
        for _ in 0..100 {
            subscribed = cache.stats().subscribed;
            if subscribed == cache.stats().keys {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(subscribed, cache.stats().keys);
    });
}
