//! Decision 13: a call whose host committed the sink's writes and then died before
//! answering is run again on another host; that run must not write a second, concurrent
//! version. A real store process, the scheduler, and two caching compute hosts (each on its
//! own thread and runtime, executors played by the test); host A dies right after its
//! commit is recorded.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use faas::client::{Arg, CallOptions, FaasClient};
use faas::data::{BoxFuture, DataPlane, OptPlane};
use faas::host::HostConfig;
use faas::hydro::{CacheConfig, CausalCache};
use faas::scheduler::{Scheduler, SchedulerConfig};
use faas::{conn, pb};
use lattice::Value;
use testkit::NodeProc;
use tokio::net::{TcpListener, TcpStream};

fn store() -> NodeProc {
    NodeProc::start_bin(
        env!("CARGO_BIN_EXE_latticekv"),
        &["--workers", "2", "--disk-nodes", "0", "--monitor", "false"],
    )
}

/// The causal cache, except that once a commit is recorded the host says so and never
/// answers again (the test then kills it).
struct DiesAfterCommit {
    inner: Arc<CausalCache>,
    committed: tokio::sync::mpsc::UnboundedSender<()>,
}

impl DataPlane for DiesAfterCommit {
    fn snapshot<'a>(
        &'a self,
        run_id: u64,
        keys: Vec<Bytes>,
    ) -> BoxFuture<'a, Result<Vec<pb::KeyRead>, String>> {
        self.inner.snapshot(run_id, keys)
    }

    fn commit<'a>(
        &'a self,
        run_id: u64,
        writes: Vec<pb::Write>,
    ) -> BoxFuture<'a, Result<(), String>> {
        DataPlane::commit(&*self.inner, run_id, writes)
    }

    fn release(&self, run_id: u64) {
        self.inner.release(run_id);
    }

    fn committed<'a>(&'a self, marker: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        self.inner.committed(marker)
    }

    fn mark_committed<'a>(&'a self, marker: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.inner.mark_committed(marker).await?;
            let _ = self.committed.send(());
            std::future::pending().await
        })
    }

    fn opt(&self) -> Option<&dyn OptPlane> {
        self.inner.opt()
    }
}

/// Executors played by the test: each writes its argument's key with `from-NAME`.
async fn executor(addr: SocketAddr, id: u32, name: String) {
    let mut s = loop {
        match TcpStream::connect(addr).await {
            Ok(s) => break s,
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    let hello = pb::FromExecutor {
        msg: Some(pb::from_executor::Msg::Hello(pb::ExecutorHello {
            id,
            pid: 0,
            shm_bytes: 0,
        })),
    };
    conn::write(&mut s, &hello).await.unwrap();
    while let Ok(Some(pb::ToExecutor {
        msg: Some(pb::to_executor::Msg::Task(t)),
    })) = conn::read::<pb::ToExecutor, _>(&mut s).await
    {
        let writes = t
            .args
            .iter()
            .filter_map(|a| match &a.kind {
                Some(pb::task_arg::Kind::Value(v)) => Some(pb::Write {
                    key: v.clone(),
                    value: Bytes::from(format!("from-{name}")),
                }),
                _ => None,
            })
            .collect();
        let done = pb::FromExecutor {
            msg: Some(pb::from_executor::Msg::Done(pb::TaskDone {
                id: t.id,
                result: Some(pb::task_done::Result::Value(Bytes::from_static(b"ok"))),
                writes,
                exception: Bytes::new(),
            })),
        };
        if conn::write(&mut s, &done).await.is_err() {
            return;
        }
    }
}

/// A host on its own thread; dropping the returned sender ends its runtime at once.
fn host(
    name: &str,
    scheduler: SocketAddr,
    store: SocketAddr,
    dies: Option<tokio::sync::mpsc::UnboundedSender<()>>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (kill, killed) = tokio::sync::oneshot::channel::<()>();
    let name = name.to_string();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let client = client::Client::connect(&store.to_string()).await.unwrap();
            let cache = CausalCache::start(
                client,
                CacheConfig {
                    slots: 2,
                    refresh_period: Duration::from_millis(10),
                    ..Default::default()
                },
            );
            let data: Arc<dyn DataPlane> = match dies {
                Some(committed) => Arc::new(DiesAfterCommit {
                    inner: cache,
                    committed,
                }),
                None => cache,
            };
            let free = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let executor_addr = free.local_addr().unwrap();
            drop(free);
            let mut config = HostConfig::new(scheduler.to_string());
            config.executors = 0;
            config.executor_listen = executor_addr;
            config.host_id = name.clone();
            let (_stop, shutdown) = tokio::sync::watch::channel(false);
            tokio::spawn(faas::host::run(config, data, shutdown));
            for id in 0..2 {
                tokio::spawn(executor(executor_addr, id, name.clone()));
            }
            let _ = killed.await;
        });
        drop(rt);
    });
    (kill, thread)
}

#[test]
fn a_sink_run_again_after_its_host_died_having_committed_does_not_write_twice() {
    let node = store();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A local set: a scheduler's `serve` future is not `Send`.
    tokio::task::LocalSet::new().block_on(&rt, async {
        let client = client::Client::connect(&node.native.to_string())
            .await
            .unwrap();
        let sched = Scheduler::bind(
            "127.0.0.1:0".parse().unwrap(),
            client.clone(),
            SchedulerConfig::default(),
        )
        .await
        .unwrap();
        let addr = sched.local_addr().unwrap();
        // The call below is the scheduler's first run.
        let marker = format!("{}{}/1", faas::data::COMMIT_MARKER_PREFIX, sched.id());
        let mut hosts = sched.hosts();
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        tokio::task::spawn_local(sched.serve(shutdown));

        let (committed_tx, mut committed) = tokio::sync::mpsc::unbounded_channel();
        let (kill_a, thread_a) = host("a", addr, node.native, Some(committed_tx));
        hosts.wait_for(|n| *n == 1).await.unwrap();
        let faas = FaasClient::connect(&addr.to_string()).await.unwrap();
        faas.register_function("w", b"code".to_vec()).await.unwrap();
        let key = "recommit/k";
        let options = CallOptions {
            protocol: pb::Protocol::Ct,
            timeout: Some(Duration::from_secs(60)),
        };
        let call = tokio::task::spawn_local(async move {
            faas.call("w", vec![Arg::Value(key.as_bytes().to_vec())], options)
                .await
        });
        // A committed and recorded it, and hangs: B joins, A dies, the run goes to B.
        tokio::time::timeout(Duration::from_secs(60), committed.recv())
            .await
            .expect("host A never committed");
        assert!(
            client.get(&marker).await.unwrap().is_some(),
            "{marker} not set"
        );
        let (_kill_b, _thread_b) = host("b", addr, node.native, None);
        hosts.wait_for(|n| *n == 2).await.unwrap();
        drop(kill_a);
        thread_a.join().unwrap();
        let value = tokio::time::timeout(Duration::from_secs(60), call)
            .await
            .expect("the call never completed")
            .unwrap()
            .expect("the call failed");
        assert_eq!(&value[..], b"ok");

        // One version, A's: B found the commit recorded and did not write again.
        match client.get(key).await.unwrap() {
            Some(Value::MultiKeyCausal(v)) => {
                let values: Vec<&[u8]> = v.values().map(|b| &b[..]).collect();
                assert_eq!(values, vec![&b"from-a"[..]], "{v:?}");
                assert_eq!(v.versions().len(), 1, "{v:?}");
            }
            other => panic!("{key} holds {other:?}"),
        }
        // The call ended: the scheduler deletes its marker (in the background).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while client.get(&marker).await.unwrap().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "{marker} never deleted"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}
