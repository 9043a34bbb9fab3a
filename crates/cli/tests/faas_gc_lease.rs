//! Dependency GC checks its soundness condition (one scheduler per store) instead of
//! assuming it: a scheduler running rounds pauses them while another scheduler holds a
//! lease on the same store, and resumes when that one stops cleanly or its lease runs out
//! (killed outright). A real store process; the schedulers and a caching compute host
//! (no executors: a round needs only the cache's reports) on real loopback sockets.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use faas::hydro::{CacheConfig, CausalCache};
use faas::scheduler::lease::LEASES_KEY;
use faas::scheduler::{Scheduler, SchedulerConfig, SchedulerStats, StatsHandle};
use testkit::rt;
use testkit::NodeProc;
use tokio::sync::watch;

const HEARTBEAT: Duration = Duration::from_millis(50);
const LEASE: Duration = Duration::from_millis(800);

fn store() -> NodeProc {
    NodeProc::start_bin(
        env!("CARGO_BIN_EXE_latticekv"),
        &["--workers", "2", "--disk-nodes", "0", "--monitor", "false"],
    )
}

fn config(gc: Option<Duration>) -> SchedulerConfig {
    SchedulerConfig {
        dep_gc_period: gc,
        heartbeat: HEARTBEAT,
        lease: LEASE,
        ..SchedulerConfig::default()
    }
}

/// Polls `stats` until `done` holds (the counters have no event to wait on); panics after
/// 60 s.
async fn until(stats: &StatsHandle, what: &str, done: impl Fn(&SchedulerStats) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = stats.stats();
        if done(&s) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: never happened: {s:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A scheduler on its own thread and runtime: `stop` ends it cleanly (it withdraws its
/// lease), dropping the returned killer without sending drops its runtime as a crash
/// would (nothing withdrawn, the heartbeat just stops).
struct Other {
    id: String,
    stop: watch::Sender<bool>,
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Other {
    fn start(store: SocketAddr) -> Other {
        let (stop, shutdown) = watch::channel(false);
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let client = client::Client::connect(&store.to_string()).await.unwrap();
                let s = Scheduler::bind("127.0.0.1:0".parse().unwrap(), client, config(None))
                    .await
                    .unwrap();
                tx.send(s.id().to_string()).unwrap();
                tokio::select! {
                    _ = s.serve(shutdown) => {}
                    _ = killed => {}
                }
            });
            drop(rt);
        });
        Other {
            id: rx.recv().unwrap(),
            stop,
            kill: Some(kill),
            thread: Some(thread),
        }
    }

    fn stop(mut self) {
        let _ = self.stop.send(true);
        self.thread.take().unwrap().join().unwrap();
    }

    fn kill(mut self) {
        let _ = self.kill.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap();
    }
}

async fn members(store: &client::Client) -> Vec<String> {
    store
        .set_members(LEASES_KEY)
        .await
        .unwrap()
        .iter()
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .collect()
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out"))
}

#[test]
fn a_second_scheduler_pauses_the_first_ones_gc_rounds() {
    let node = store();
    // A local set: a scheduler's `serve` future is not `Send`.
    tokio::task::LocalSet::new().block_on(&rt(), async {
        let client = client::Client::connect(&node.native.to_string())
            .await
            .unwrap();
        // Scheduler A with GC every 50 ms, and one caching host.
        let a = Scheduler::bind(
            "127.0.0.1:0".parse().unwrap(),
            client.clone(),
            config(Some(Duration::from_millis(50))),
        )
        .await
        .unwrap();
        let a_id = a.id().to_string();
        let stats = a.stats_handle();
        let mut hosts = a.hosts();
        let addr = a.local_addr().unwrap();
        let (_stop_a, shutdown) = watch::channel(false);
        tokio::task::spawn_local(a.serve(shutdown.clone()));
        let cache = CausalCache::start(client.clone(), CacheConfig::default());
        let mut host = faas::host::HostConfig::new(addr.to_string());
        host.executors = 0;
        tokio::spawn(faas::host::run(host, cache.clone(), shutdown));
        within("the host", hosts.wait_for(|n| *n == 1))
            .await
            .unwrap();
        until(&stats, "rounds alone", |s| s.gc_rounds >= 2).await;
        assert_eq!(stats.stats().gc_paused, 0);
        assert_eq!(members(&client).await, vec![a_id.clone()]);

        // B appears: A's rounds stop.
        let b = Other::start(node.native);
        until(&stats, "paused by B", |s| s.gc_paused == 1).await;
        let paused = stats.stats();
        until(&stats, "skips while B runs", |s| {
            s.gc_skipped >= paused.gc_skipped + 5
        })
        .await;
        let later = stats.stats();
        assert_eq!(
            later.gc_rounds, paused.gc_rounds,
            "a round completed while another scheduler was live: {later:?}"
        );
        assert_eq!(later.gc_paused, 1);
        let cache_rounds = cache.stats().gc_rounds;

        // B stops cleanly: its lease is withdrawn, A resumes at once.
        let b_id = b.id.clone();
        b.stop();
        assert!(!members(&client).await.contains(&b_id));
        until(&stats, "resumed after B stopped", |s| {
            s.gc_paused == 0 && s.gc_rounds > later.gc_rounds
        })
        .await;
        // The scheduler counts a round once it has sent the stable clocks; the host merges
        // them a moment later.
        let deadline = Instant::now() + Duration::from_secs(60);
        while cache.stats().gc_rounds <= cache_rounds {
            assert!(Instant::now() < deadline, "the cache learnt nothing new");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        // C is killed outright: A resumes only once C's lease has run out, and removes C.
        let c = Other::start(node.native);
        let c_id = c.id.clone();
        until(&stats, "paused by C", |s| s.gc_paused == 1).await;
        let before = stats.stats().gc_rounds;
        let killed = Instant::now();
        c.kill();
        until(&stats, "resumed after C's lease", |s| {
            s.gc_paused == 0 && s.gc_rounds > before
        })
        .await;
        let waited = killed.elapsed();
        // Its last beat was at most a heartbeat before the kill.
        assert!(
            waited + HEARTBEAT * 2 >= LEASE,
            "resumed {waited:?} after the kill, before the {LEASE:?} lease ran out"
        );
        assert_eq!(members(&client).await, vec![a_id]);
        assert!(!members(&client).await.contains(&c_id));
    });
}

/// A round samples every replica of its keys with one `get_many_at` per replica address:
/// each answers what it holds, as `get_at` key by key does.
#[test]
fn a_batched_sample_reads_what_each_replica_holds() {
    let node = store();
    rt().block_on(async {
        let client = client::Client::connect(&node.native.to_string())
            .await
            .unwrap();
        let keys: Vec<String> = (0..50).map(|i| format!("sample{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            client.assign(k, format!("v{i}")).await.unwrap();
        }
        let layout = client.layout();
        let mut by_addr: std::collections::BTreeMap<String, Vec<&String>> = Default::default();
        for k in &keys {
            for rep in layout.replicas(k.as_bytes()) {
                let addr = layout.addr(rep).unwrap().to_string();
                by_addr.entry(addr).or_default().push(k);
            }
        }
        assert!(!by_addr.is_empty());
        for (addr, ks) in &by_addr {
            let answers = client.get_many_at(addr, ks).await.unwrap();
            assert_eq!(answers.len(), ks.len());
            for (k, a) in ks.iter().zip(answers) {
                let one = client.get_at(addr, k.as_bytes()).await.unwrap();
                assert_eq!(a.unwrap(), one, "{k} at {addr}");
            }
        }
        // A worker that is not a key's replica does not answer for it.
        let addrs: Vec<&String> = by_addr.keys().collect();
        assert_eq!(addrs.len(), 2, "two workers, keys spread over both");
        let stranger = keys
            .iter()
            .find(|k| !by_addr[addrs[0]].contains(k))
            .expect("a key not held by the first worker");
        let a = client.get_many_at(addrs[0], &[stranger]).await.unwrap();
        assert!(a[0].is_err(), "{a:?}");
    });
}
