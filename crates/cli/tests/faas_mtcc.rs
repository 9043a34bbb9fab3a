//! MTCC across compute hosts (issue 16): a real store process, the real scheduler and two
//! compute hosts on real loopback sockets, each host with its own causal cache (or the
//! bare store) and executors played by the test, and a randomized workload of linear
//! (f1 → f2 → f3) and V-shaped (a, b → c) DAGs under protocol OPT, whose functions the
//! scheduler places on both hosts, while writers put mutually dependent causal versions
//! straight to the store. Every request's read set is checked with `cache::checker`:
//! 0 anomalies with the caches; the same workload on the bare store (`--data-plane
//! direct`) shows anomalies, so the checker can fail. Then a host is killed mid-DAG: the
//! call is retried on the other host and completes once, without anomaly.
//!
//! Each host runs on its own thread and runtime, so killing it drops every socket and task
//! it had at once, as a crashed process would (nothing is released gracefully).
//! The metadata helpers are `faas_common`, shared with `faas_tcc.rs`; the writers and Zipf follow it.

mod faas_common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cache::checker::{self, extract, ReadMeta};
use cache::versionset::refs_of;
use cache::{CacheId, Executor, Key, MultiKeyCausal};
use faas::client::{Arg, CallOptions, FaasClient};
use faas::data::DataPlane;
use faas::host::HostConfig;
use faas::hydro::{causal_of, CacheConfig, CausalCache};
use faas::scheduler::{Scheduler, SchedulerConfig};
use faas::{conn, pb};

use lattice::Value;
use testkit::NodeProc;
use tokio::net::{TcpListener, TcpStream};

use faas_common::{commit_embedded, decode, encode, hlc_now, meta_of, Mode};
use testkit::rt;

fn store() -> NodeProc {
    NodeProc::start_bin(
        env!("CARGO_BIN_EXE_latticekv"),
        &["--workers", "2", "--disk-nodes", "0", "--monitor", "false"],
    )
}

/// What the test's executors of one host did.
#[derive(Default)]
struct Ran {
    tasks: AtomicU64,
    /// A `slow` function started here.
    slow: AtomicBool,
    /// Notified when it does.
    slow_started: tokio::sync::Notify,
}

/// An executor played by the test: returns its upstreams' views plus `(key, meta)` of its
/// own key arguments; a value `w:K1,K2` makes it write those keys; a function named
/// `slow…` takes a second first.
async fn executor(addr: SocketAddr, id: u32, mode: Mode, ran: Arc<Ran>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let hello = pb::FromExecutor {
        msg: Some(pb::from_executor::Msg::Hello(pb::ExecutorHello {
            id,
            pid: 0,
            shm_bytes: 0,
        })),
    };
    conn::write(&mut s, &hello).await.unwrap();
    let mut writer = Executor::new(0x5000_0000 + id + fastrand::u32(..1 << 20) * 16, 1000);
    while let Ok(Some(pb::ToExecutor {
        msg: Some(pb::to_executor::Msg::Task(t)),
    })) = conn::read::<pb::ToExecutor, _>(&mut s).await
    {
        ran.tasks.fetch_add(1, Ordering::Relaxed);
        if t.function.starts_with("slow") {
            ran.slow.store(true, Ordering::SeqCst);
            ran.slow_started.notify_one();
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let mut out = Vec::new();
        let mut seen: BTreeMap<Key, ReadMeta> = BTreeMap::new();
        let mut to_write: Vec<Key> = Vec::new();
        for a in &t.args {
            match &a.kind {
                Some(pb::task_arg::Kind::Upstream(u)) => {
                    out.extend_from_slice(u);
                    seen.extend(decode(u));
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
        let payload = format!("t{}-{id}", t.id).into_bytes();
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

/// A compute host on its own thread and runtime. Dropping `kill` ends the runtime at once:
/// every socket and task of the host goes, as when a process dies.
struct HostProc {
    ran: Arc<Ran>,
    cache: Option<Arc<CausalCache>>,
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HostProc {
    fn start(name: &str, scheduler: SocketAddr, store: SocketAddr, mode: Mode) -> HostProc {
        let ran = Arc::new(Ran::default());
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (name, ran2) = (name.to_string(), ran.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let client = client::Client::connect(&store.to_string()).await.unwrap();
                let (data, cache): (Arc<dyn DataPlane>, _) = match mode {
                    Mode::Cache => {
                        let c = CausalCache::start(
                            client,
                            CacheConfig {
                                slots: 4,
                                refresh_period: Duration::from_millis(10),
                                ..Default::default()
                            },
                        );
                        (c.clone(), Some(c))
                    }
                    Mode::Direct => (Arc::new(faas::data::DirectStore::new(client)), None),
                };
                let free = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let executor_addr = free.local_addr().unwrap();
                drop(free);
                let mut config = HostConfig::new(scheduler.to_string());
                config.executors = 0; // no Python: the test's executors connect instead
                config.executor_listen = executor_addr;
                config.host_id = name;
                let (_stop, shutdown) = tokio::sync::watch::channel(false);
                tokio::spawn(faas::host::run(config, data, shutdown));
                for id in 0..4 {
                    // The host's listener may not be bound yet: retry the connection.
                    let ran = ran2.clone();
                    tokio::spawn(async move {
                        loop {
                            if TcpStream::connect(executor_addr).await.is_ok() {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        executor(executor_addr, id, mode, ran).await;
                    });
                }
                ready_tx.send(cache).unwrap();
                let _ = killed.await;
            });
            drop(rt); // every task and socket of the host
        });
        let cache = ready.recv().unwrap();
        HostProc {
            ran,
            cache,
            kill: Some(kill),
            thread: Some(thread),
        }
    }

    fn kill(&mut self) {
        drop(self.kill.take());
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for HostProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Zipf over `n` keys with exponent `s`.
struct Zipf(Vec<f64>, &'static str);

impl Zipf {
    /// Keys `PREFIX-i` (each mode its own keys: a causal key refuses LWW puts).
    fn new(n: usize, s: f64, prefix: &'static str) -> Zipf {
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
            prefix,
        )
    }

    fn key(&self, rng: &mut fastrand::Rng) -> Key {
        let x = rng.f64();
        let i = self
            .0
            .iter()
            .position(|c| x <= *c)
            .unwrap_or(self.0.len() - 1);
        Key::from(format!("{}-{i}", self.1).into_bytes())
    }
}

/// A writer outside the DAGs: commits two keys as mutually dependent versions and puts
/// them one at a time with a pause between.
async fn direct_writer(
    store: client::Client,
    mode: Mode,
    seed: u64,
    zipf: Arc<Zipf>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut writer = Executor::new(0x6000_0000 + seed as u32, 1000);
    let mut commits = 0;
    while !stop.load(Ordering::Relaxed) {
        let (a, b) = (zipf.key(&mut rng), zipf.key(&mut rng));
        if a == b {
            continue;
        }
        let keys = [a, b];
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
                commit_embedded(&mut writer, &reads, &keys, &payload)
                    .into_iter()
                    .map(|(k, bytes)| {
                        let ts = lattice::Timestamp::new(hlc_now(), 0x6000 + seed);
                        (
                            k,
                            Value::Lww(lattice::Lww {
                                ts,
                                value: bytes.into(),
                            }),
                        )
                    })
                    .collect()
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
}

/// A scheduler (in this process, on a loopback port) and two hosts.
struct Cluster {
    faas: FaasClient,
    hosts: Vec<HostProc>,
    hosts_up: tokio::sync::watch::Receiver<usize>,
    _stop: tokio::sync::watch::Sender<bool>,
}

async fn cluster(store: &NodeProc, mode: Mode) -> Cluster {
    cluster_with(store, mode, None).await
}

/// A cluster whose scheduler runs dependency-GC rounds every `gc` (`None`: off).
async fn cluster_with(store: &NodeProc, mode: Mode, gc: Option<Duration>) -> Cluster {
    // The scheduler on its own thread and runtime too (it ends with `stop`).
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let (tx, rx) = std::sync::mpsc::channel();
    let store_addr = store.native;
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let client = client::Client::connect(&store_addr.to_string())
                .await
                .unwrap();
            let sched = Scheduler::bind(
                "127.0.0.1:0".parse().unwrap(),
                client,
                SchedulerConfig {
                    dep_gc_period: gc,
                    ..SchedulerConfig::default()
                },
            )
            .await
            .unwrap();
            tx.send((sched.local_addr().unwrap(), sched.hosts()))
                .unwrap();
            sched.serve(shutdown).await.unwrap();
        });
    });
    let (addr, mut hosts_up) = rx.recv().unwrap();
    let hosts: Vec<HostProc> = ["host-a", "host-b"]
        .iter()
        .map(|n| HostProc::start(n, addr, store.native, mode))
        .collect();
    hosts_up.wait_for(|n| *n == 2).await.unwrap();
    let faas = FaasClient::connect(&addr.to_string()).await.unwrap();
    for f in ["f1", "f2", "f3", "a", "b", "c", "slow1", "s2"] {
        faas.register_function(f, b"code".to_vec()).await.unwrap();
    }
    type Shape<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);
    let dags: [Shape; 3] = [
        ("line", &["f1", "f2", "f3"], &[("f1", "f2"), ("f2", "f3")]),
        ("vee", &["a", "b", "c"], &[("a", "c"), ("b", "c")]),
        ("slow", &["slow1", "s2"], &[("slow1", "s2")]),
    ];
    for (name, fns, edges) in dags {
        let fns: Vec<String> = fns.iter().map(|f| f.to_string()).collect();
        let edges: Vec<(String, String)> = edges
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        faas.register_dag(name, &fns, &edges).await.unwrap();
    }
    Cluster {
        faas,
        hosts,
        hosts_up,
        _stop: stop,
    }
}

fn refs(keys: &[Key]) -> Vec<Arg> {
    keys.iter().map(|k| Arg::Ref(k.to_vec())).collect()
}

fn write_arg(keys: &[Key]) -> Arg {
    let list: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let mut v = b"w:".to_vec();
    v.extend(list.join(&b','));
    Arg::Value(v)
}

/// One random request: a line or a V, 1–2 Zipf keys per function, the sink writing 1–2
/// keys of the read set.
async fn request(
    faas: &FaasClient,
    zipf: &Zipf,
    rng: &mut fastrand::Rng,
    protocol: pb::Protocol,
) -> Result<(Bytes, pb::CallStats), String> {
    let (dag, fns) = if rng.bool() {
        ("line", ["f1", "f2", "f3"])
    } else {
        ("vee", ["a", "b", "c"])
    };
    let keys: Vec<Vec<Key>> = (0..3)
        .map(|_| {
            let mut ks: Vec<Key> = (0..rng.usize(1..=2)).map(|_| zipf.key(rng)).collect();
            ks.dedup();
            ks
        })
        .collect();
    let all: Vec<Key> = keys.iter().flatten().cloned().collect();
    let mut writes = vec![all[rng.usize(..all.len())].clone()];
    let k = all[rng.usize(..all.len())].clone();
    if rng.bool() && !writes.contains(&k) {
        writes.push(k);
    }
    let mut args: BTreeMap<String, Vec<Arg>> = BTreeMap::new();
    for (f, ks) in fns.iter().zip(&keys) {
        args.insert(f.to_string(), refs(ks));
    }
    args.get_mut(fns[2]).unwrap().push(write_arg(&writes));
    let options = CallOptions {
        protocol,
        timeout: Some(Duration::from_secs(30)),
    };
    faas.call_dag_with_stats(dag, args, options)
        .await
        .map_err(|e| e.to_string())
}

#[derive(Debug, Default)]
struct Outcome {
    requests: usize,
    failed: usize,
    anomalous: usize,
    /// Requests where some key read depends on another key of the read set.
    related: usize,
    /// From the calls' stats: aborted attempts, causal metadata bytes, protocols ended
    /// under, and calls whose attempts are not their aborts + 1.
    aborts: u32,
    meta_bytes: u64,
    protocols: BTreeSet<i32>,
    miscounted: usize,
}

fn check(outcome: &mut Outcome, result: Result<(Bytes, pb::CallStats), String>) {
    outcome.requests += 1;
    let Ok((v, stats)) = result else {
        eprintln!("request failed: {result:?}");
        outcome.failed += 1;
        return;
    };
    outcome.aborts += stats.aborts;
    outcome.meta_bytes += stats.meta_bytes;
    outcome.protocols.insert(stats.protocol);
    if stats.attempts != stats.aborts + 1 || stats.early_aborts > stats.aborts {
        outcome.miscounted += 1;
    }
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
    }
}

async fn workload(
    c: &Cluster,
    store: &NodeProc,
    mode: Mode,
    protocol: pb::Protocol,
    clients: usize,
    per_client: usize,
    seed: u64,
) -> Outcome {
    let client = client::Client::connect(&store.native.to_string())
        .await
        .unwrap();
    let prefix = match mode {
        Mode::Cache => "mtcc",
        Mode::Direct => "direct",
    };
    let zipf = Arc::new(Zipf::new(8, 1.0, prefix));
    let stop = Arc::new(AtomicBool::new(false));
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
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (faas, zipf) = (c.faas.clone(), zipf.clone());
            tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(seed * 1000 + i as u64);
                let mut out = Vec::new();
                for _ in 0..per_client {
                    out.push(request(&faas, &zipf, &mut rng, protocol).await);
                }
                out
            })
        })
        .collect();
    let mut outcome = Outcome::default();
    for t in tasks {
        for r in t.await.unwrap() {
            check(&mut outcome, r);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    outcome
}

/// Every attempt's pins are released at both caches (the scheduler's `ReleaseAttempt`
/// after the last answer may still be on its way: up to 2 s).
async fn assert_pins_released(c: &Cluster) {
    for h in &c.hosts {
        let cache = h.cache.as_ref().unwrap();
        for _ in 0..200 {
            if cache.stats().pinned_runs == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let stats = cache.stats();
        assert_eq!(stats.pinned_runs, 0, "pins left behind: {stats:?}");
    }
}

#[test]
fn opt_across_two_hosts_shows_no_anomaly_and_the_bare_store_does() {
    let store = store();
    rt().block_on(async {
        let c = cluster(&store, Mode::Cache).await;
        let opt = workload(&c, &store, Mode::Cache, pb::Protocol::Opt, 6, 25, 1).await;
        let stats: Vec<_> = c
            .hosts
            .iter()
            .map(|h| h.cache.as_ref().unwrap().stats())
            .collect();
        let ran: Vec<u64> = c
            .hosts
            .iter()
            .map(|h| h.ran.tasks.load(Ordering::Relaxed))
            .collect();
        eprintln!("OPT on 2 hosts: {opt:?}; tasks per host {ran:?}; caches {stats:?}");
        assert_eq!(opt.failed, 0, "{opt:?}");
        assert_eq!(opt.anomalous, 0, "anomalies under OPT: {opt:?}");
        assert!(opt.related > 0, "the checker had nothing to check: {opt:?}");
        // The calls' stats: OPT's edge metadata counted, aborts consistent with attempts
        // (a call that aborted too often ends under CT).
        assert_eq!(opt.miscounted, 0, "{opt:?}");
        assert!(opt.meta_bytes > 0, "{opt:?}");
        let (opt_p, ct_p) = (pb::Protocol::Opt as i32, pb::Protocol::Ct as i32);
        assert!(
            opt.protocols.iter().all(|p| [opt_p, ct_p].contains(p)),
            "{opt:?}"
        );
        assert!(
            ran.iter().all(|n| *n > 0),
            "functions ran on one host only: {ran:?}"
        );
        assert!(stats.iter().all(|s| s.opt_functions > 0), "{stats:?}");
        assert!(
            stats.iter().map(|s| s.remote_fetches).sum::<u64>() > 0,
            "no cache fetched a pinned version from the other: {stats:?}"
        );
        assert_pins_released(&c).await;
        for h in &c.hosts {
            h.cache.as_ref().unwrap().check().unwrap();
        }
    });
    let direct = rt().block_on(async {
        let c = cluster(&store, Mode::Direct).await;
        let out = workload(&c, &store, Mode::Direct, pb::Protocol::Opt, 6, 25, 2).await;
        let ran: Vec<u64> = c
            .hosts
            .iter()
            .map(|h| h.ran.tasks.load(Ordering::Relaxed))
            .collect();
        assert!(
            ran.iter().all(|n| *n > 0),
            "functions ran on one host only: {ran:?}"
        );
        out
    });
    eprintln!("bare store, 2 hosts: {direct:?}");
    assert_eq!(direct.failed, 0, "{direct:?}");
    assert!(
        direct.anomalous > 0,
        "the bare store showed no anomaly: {direct:?}"
    );
}

#[test]
fn con_across_two_hosts_shows_no_anomaly() {
    let store = store();
    rt().block_on(async {
        let c = cluster(&store, Mode::Cache).await;
        let con = workload(&c, &store, Mode::Cache, pb::Protocol::Con, 6, 25, 3).await;
        let stats: Vec<_> = c
            .hosts
            .iter()
            .map(|h| h.cache.as_ref().unwrap().stats())
            .collect();
        eprintln!("CON on 2 hosts: {con:?}; caches {stats:?}");
        assert_eq!(con.failed, 0, "{con:?}");
        assert_eq!(con.anomalous, 0, "anomalies under CON: {con:?}");
        assert!(con.related > 0, "the checker had nothing to check: {con:?}");
        assert!(stats.iter().all(|s| s.con_functions > 0), "{stats:?}");
        assert!(stats.iter().all(|s| s.opt_functions == 0), "{stats:?}");
        assert_pins_released(&c).await;
    });
}

#[test]
fn hb_the_default_across_two_hosts_shows_no_anomaly() {
    let store = store();
    rt().block_on(async {
        let c = cluster(&store, Mode::Cache).await;
        // No protocol asked: with two caching hosts the scheduler picks HB.
        let hb = workload(&c, &store, Mode::Cache, pb::Protocol::Default, 6, 25, 4).await;
        let stats: Vec<_> = c
            .hosts
            .iter()
            .map(|h| h.cache.as_ref().unwrap().stats())
            .collect();
        eprintln!("HB (default) on 2 hosts: {hb:?}; caches {stats:?}");
        assert_eq!(hb.failed, 0, "{hb:?}");
        assert_eq!(hb.anomalous, 0, "anomalies under HB: {hb:?}");
        assert!(hb.related > 0, "the checker had nothing to check: {hb:?}");
        assert_eq!(hb.miscounted, 0, "{hb:?}");
        assert!(hb.meta_bytes > 0, "{hb:?}");
        assert!(hb.protocols.contains(&(pb::Protocol::Hb as i32)), "{hb:?}");
        // Spread over both hosts, as OPT (simulation passed) or CON (early abort).
        assert!(
            stats.iter().all(|s| s.opt_functions + s.con_functions > 0),
            "{stats:?}"
        );
        assert_pins_released(&c).await;
    });
}

#[test]
fn a_host_killed_mid_dag_is_retried_on_the_other_and_the_call_completes_once() {
    let store = store();
    rt().block_on(kill_mid_dag(&store, pb::Protocol::Opt, b"killed-opt"));
    // HB (the default): functions placed first, OPT after the simulation.
    rt().block_on(kill_mid_dag(&store, pb::Protocol::Default, b"killed-hb"));
}

/// Calls a 2-function DAG whose first function is slow, kills the host running it while
/// it runs it, and checks the call completes once on the other host without anomaly.
async fn kill_mid_dag(store: &NodeProc, protocol: pb::Protocol, key: &[u8]) {
    {
        let mut c = cluster(store, Mode::Cache).await;
        let key = Key::from(key);
        let mut args: BTreeMap<String, Vec<Arg>> = BTreeMap::new();
        args.insert("slow1".into(), refs(std::slice::from_ref(&key)));
        args.insert(
            "s2".into(),
            vec![
                Arg::Ref(key.to_vec()),
                write_arg(std::slice::from_ref(&key)),
            ],
        );
        let options = CallOptions {
            protocol,
            timeout: Some(Duration::from_secs(30)),
        };
        let call = {
            let faas = c.faas.clone();
            tokio::spawn(async move { faas.call_dag("slow", args, options).await })
        };
        // Kill the host that runs the slow first function, while it runs it.
        let victim = tokio::select! {
            () = c.hosts[0].ran.slow_started.notified() => 0,
            () = c.hosts[1].ran.slow_started.notified() => 1,
        };
        let survivor = 1 - victim;
        c.hosts[victim].kill();
        c.hosts_up.wait_for(|n| *n == 1).await.unwrap();
        let result = call
            .await
            .unwrap()
            .expect("the call is retried on the other host");
        let reads: BTreeMap<Key, ReadMeta> = decode(&result).into_iter().collect();
        assert!(reads.contains_key(&key));
        assert!(checker::check(&reads).is_clean());
        assert!(c.hosts[survivor].ran.slow.load(Ordering::SeqCst));
        // Completed once: the sink's write is one version (a second commit would be a
        // concurrent sibling: the retried attempt never saw the first one's write).
        let client = client::Client::connect(&store.native.to_string())
            .await
            .unwrap();
        let stored = client
            .get(&key)
            .await
            .unwrap()
            .expect("the sink wrote the key");
        let Value::MultiKeyCausal(v) = stored else {
            panic!("{stored:?}")
        };
        assert_eq!(v.values().count(), 1, "{v:?}");
    }
}

/// Dependency-metadata GC on (a round every 50 ms): HB's workload still reads snapshots
/// only, rounds complete and prune, and a hot key rewritten by calls that each read it and
/// two of 40 other keys keeps a short dependency list (what was read since the last
/// rounds), where without GC it accumulates nearly every key any writer read.
#[test]
fn dependency_gc_keeps_a_hot_keys_deps_bounded_and_reads_snapshots() {
    let store = store();
    let with_gc = rt().block_on(async {
        let c = cluster_with(&store, Mode::Cache, Some(Duration::from_millis(50))).await;
        let hb = workload(&c, &store, Mode::Cache, pb::Protocol::Default, 4, 20, 5).await;
        eprintln!("HB with dependency GC: {hb:?}");
        assert_eq!(hb.failed, 0, "{hb:?}");
        assert_eq!(hb.anomalous, 0, "anomalies with dependency GC: {hb:?}");
        let deps = hot_key_deps(&c, &store, "gc", true).await;
        let stats: Vec<_> = c
            .hosts
            .iter()
            .map(|h| h.cache.as_ref().unwrap().stats())
            .collect();
        eprintln!("caches with dependency GC: {stats:?}");
        assert!(stats.iter().all(|s| s.gc_rounds > 0), "{stats:?}");
        assert!(stats.iter().any(|s| s.gc_pruned > 0), "{stats:?}");
        for h in &c.hosts {
            h.cache.as_ref().unwrap().check().unwrap();
        }
        deps
    });
    let without = rt().block_on(async {
        let c = cluster(&store, Mode::Cache).await;
        hot_key_deps(&c, &store, "nogc", false).await
    });
    eprintln!("hot key's dependencies after each call: with GC {with_gc:?}, without {without:?}");
    let grown = *without.last().unwrap();
    assert!(grown >= 20, "{without:?}");
    // Rounds lag the calls (every 5 calls the test waits for two more rounds, so how many
    // calls one round lags does not depend on how fast calls are), so the bound is
    // relative: over the last 20 calls the list stays under half of what it grows to
    // without GC.
    let worst = with_gc.iter().skip(40).max().copied().unwrap_or(0);
    assert!(
        worst * 2 < grown,
        "with GC {with_gc:?}, without {without:?}"
    );
}

/// 60 calls, each reading `hot` and two of 40 cold keys (written once, before) and
/// writing `hot`; the number of dependencies of the stored `hot` after each. With `gc`,
/// after every 5 calls it waits until every cache has completed two more GC rounds (the
/// second one started after those calls): faster calls then do not mean more calls per
/// round.
async fn hot_key_deps(c: &Cluster, store: &NodeProc, prefix: &str, gc: bool) -> Vec<usize> {
    let client = client::Client::connect(&store.native.to_string())
        .await
        .unwrap();
    let hot = Key::from(format!("{prefix}/hot").as_bytes());
    let cold = |i: usize| Key::from(format!("{prefix}/cold{i}").as_bytes());
    // The cold keys exist (a key read as absent is no dependency), each at one version.
    for i in 0..40 {
        let v = MultiKeyCausal::new(lattice::CausalVersion {
            clock: [(1_000 + i as u64, 1)].into_iter().collect(),
            deps: BTreeMap::new(),
            value: Key::from(&b"cold"[..]),
        });
        client.put(cold(i), Value::MultiKeyCausal(v)).await.unwrap();
    }
    let mut rng = fastrand::Rng::with_seed(7);
    let mut sizes = Vec::new();
    for _ in 0..60 {
        let mut args: BTreeMap<String, Vec<Arg>> = BTreeMap::new();
        args.insert("f1".into(), refs(std::slice::from_ref(&hot)));
        args.insert("f2".into(), refs(&[cold(rng.usize(..40))]));
        args.insert(
            "f3".into(),
            vec![
                Arg::Ref(cold(rng.usize(..40)).to_vec()),
                write_arg(std::slice::from_ref(&hot)),
            ],
        );
        let options = CallOptions {
            protocol: pb::Protocol::Ct,
            timeout: Some(Duration::from_secs(30)),
        };
        c.faas
            .call_dag_with_stats("line", args, options)
            .await
            .unwrap();
        let deps = match client.get(&hot).await.unwrap() {
            Some(Value::MultiKeyCausal(v)) => v.deps().len(),
            other => panic!("hot holds {other:?}"),
        };
        sizes.push(deps);
        if gc && sizes.len() % 5 == 0 {
            gc_rounds_after(c, 2).await;
        }
    }
    sizes
}

/// Waits until every host's cache has completed `more` GC rounds beyond what it had
/// completed now (at most 10 s: the rounds run every 50 ms in these tests).
async fn gc_rounds_after(c: &Cluster, more: u64) {
    let rounds = |c: &Cluster| -> Vec<u64> {
        c.hosts
            .iter()
            .map(|h| h.cache.as_ref().unwrap().stats().gc_rounds)
            .collect()
    };
    let start = rounds(c);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = rounds(c);
        if now.iter().zip(&start).all(|(n, s)| *n >= s + more) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "GC rounds did not advance: {start:?} -> {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
