//! The compute host against a scheduler and executors played by the test (no Python): the
//! order of arguments along a DAG's edges, key references read once, writes committed only
//! after the sink and only if no function raised, and a function run again when its
//! executor dies holding it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use faas::data::{BoxFuture, DataPlane};
use faas::host::HostConfig;
use faas::{conn, pb};
use tokio::net::{TcpListener, TcpStream};

/// Key references answered from a map; commits recorded.
#[derive(Default)]
struct Recording {
    values: BTreeMap<Bytes, Bytes>,
    snapshots: Mutex<Vec<Vec<Bytes>>>,
    commits: Mutex<Vec<Vec<pb::Write>>>,
}

impl DataPlane for Recording {
    fn snapshot<'a>(
        &'a self,
        _run_id: u64,
        keys: Vec<Bytes>,
    ) -> BoxFuture<'a, Result<Vec<pb::KeyRead>, String>> {
        Box::pin(async move {
            self.snapshots.lock().unwrap().push(keys.clone());
            Ok(keys
                .into_iter()
                .map(|k| {
                    let v = self.values.get(&k).cloned();
                    pb::KeyRead {
                        key: k,
                        found: v.is_some(),
                        values: v.into_iter().collect(),
                        meta: Bytes::new(),
                    }
                })
                .collect())
        })
    }

    fn commit<'a>(
        &'a self,
        _run_id: u64,
        writes: Vec<pb::Write>,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.commits.lock().unwrap().push(writes);
            Ok(())
        })
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fake executor: answers `f(args…)` (values as text, keys as `key=value`), writes
/// `(f, "w")`; `boom` raises; `flaky` kills the first executor that runs it.
async fn executor(addr: std::net::SocketAddr, id: u32, flaky_done: Arc<AtomicBool>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
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
        if t.function == "flaky" && !flaky_done.swap(true, Ordering::SeqCst) {
            return; // dies holding the task
        }
        if t.function.starts_with("slow") {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let args: Vec<String> = t
            .args
            .iter()
            .map(|a| match &a.kind {
                Some(pb::task_arg::Kind::Value(v)) | Some(pb::task_arg::Kind::Upstream(v)) => {
                    text(v)
                }
                Some(pb::task_arg::Kind::Key(k)) => format!(
                    "{}={}",
                    text(&k.key),
                    k.values.first().map(|v| text(v)).unwrap_or("-".into())
                ),
                None => "?".into(),
            })
            .collect();
        let result = if t.function == "boom" {
            pb::task_done::Result::Traceback("Traceback …\nValueError: boom".into())
        } else {
            pb::task_done::Result::Value(format!("{}({})", t.function, args.join(",")).into())
        };
        let done = pb::FromExecutor {
            msg: Some(pb::from_executor::Msg::Done(pb::TaskDone {
                id: t.id,
                result: Some(result),
                writes: vec![pb::Write {
                    key: t.function.clone().into(),
                    value: Bytes::from_static(b"w"),
                }],
                exception: Bytes::new(),
            })),
        };
        conn::write(&mut s, &done).await.unwrap();
    }
}

struct Harness {
    to_host: TcpStream,
    data: Arc<Recording>,
    _stop: tokio::sync::watch::Sender<bool>,
}

async fn harness(executors: u32) -> Harness {
    let scheduler = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let free = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let executor_addr = free.local_addr().unwrap();
    drop(free);
    let mut config = HostConfig::new(scheduler.local_addr().unwrap().to_string());
    config.executors = 0; // no Python processes: the test's executors connect instead
    config.executor_listen = executor_addr;
    let data = Arc::new(Recording {
        values: [(Bytes::from("k"), Bytes::from("v"))].into_iter().collect(),
        ..Default::default()
    });
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    tokio::spawn(faas::host::run(config, data.clone(), shutdown));
    let (mut to_host, _) = scheduler.accept().await.unwrap();
    let hello: pb::ToScheduler = conn::read(&mut to_host).await.unwrap().unwrap();
    assert!(matches!(
        hello.msg,
        Some(pb::to_scheduler::Msg::HostHello(_))
    ));
    let flaky = Arc::new(AtomicBool::new(false));
    for id in 0..executors {
        tokio::spawn(executor(executor_addr, id, flaky.clone()));
    }
    Harness {
        to_host,
        data,
        _stop: stop,
    }
}

fn args(a: &[pb::arg::Kind]) -> pb::Args {
    pb::Args {
        args: a
            .iter()
            .map(|k| pb::Arg {
                kind: Some(k.clone()),
            })
            .collect(),
    }
}

fn val(s: &str) -> pb::arg::Kind {
    pb::arg::Kind::Value(Bytes::copy_from_slice(s.as_bytes()))
}

fn key(s: &str) -> pb::arg::Kind {
    pb::arg::Kind::KeyRef(Bytes::copy_from_slice(s.as_bytes()))
}

impl Harness {
    async fn run(
        &mut self,
        run_id: u64,
        functions: &[&str],
        edges: &[(&str, &str)],
        a: &[(&str, pb::Args)],
    ) -> pb::dag_done::Result {
        let dag = pb::Dag {
            name: "d".into(),
            functions: functions.iter().map(|f| f.to_string()).collect(),
            edges: edges
                .iter()
                .map(|(x, y)| pb::Edge {
                    from: x.to_string(),
                    to: y.to_string(),
                })
                .collect(),
        };
        let run = pb::FromScheduler {
            msg: Some(pb::from_scheduler::Msg::RunDag(pb::RunDag {
                run_id,
                code: functions
                    .iter()
                    .map(|f| (f.to_string(), Bytes::from_static(b"code")))
                    .collect(),
                dag: Some(dag),
                args: a.iter().map(|(f, x)| (f.to_string(), x.clone())).collect(),
                protocol: pb::Protocol::Ct as i32,
                timeout_ms: 20_000,
                commit_marker: String::new(),
            })),
        };
        conn::write(&mut self.to_host, &run).await.unwrap();
        loop {
            let msg: pb::ToScheduler = conn::read(&mut self.to_host).await.unwrap().unwrap();
            if let Some(pb::to_scheduler::Msg::DagDone(d)) = msg.msg {
                assert_eq!(d.run_id, run_id);
                return d.result.unwrap();
            }
        }
    }
}

fn value(r: pb::dag_done::Result) -> String {
    match r {
        pb::dag_done::Result::Value(v) => text(&v),
        pb::dag_done::Result::Error(e) => panic!("error: {e:?}"),
    }
}

#[tokio::test]
async fn a_v_shaped_dag_passes_results_along_edges_and_commits_after_the_sink() {
    let mut h = harness(3).await;
    let started = tokio::time::Instant::now();
    let out = h
        .run(
            1,
            &["slow-l", "slow-r", "s"],
            &[("slow-r", "s"), ("slow-l", "s")],
            &[
                ("slow-l", args(&[val("1")])),
                ("slow-r", args(&[key("k"), key("absent")])),
                ("s", args(&[val("x")])),
            ],
        )
        .await;
    // Upstream results first, in the order of the edges, then the function's own.
    assert_eq!(value(out), "s(slow-r(k=v,absent=-),slow-l(1),x)");
    // The two branches ran at once (each takes 500 ms; one after the other, 1 s).
    assert!(
        started.elapsed() < Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        h.data.snapshots.lock().unwrap().len(),
        1,
        "one read of the read set"
    );
    let commits = h.data.commits.lock().unwrap().clone();
    assert_eq!(commits.len(), 1);
    let mut written: Vec<String> = commits[0].iter().map(|w| text(&w.key)).collect();
    written.sort();
    assert_eq!(written, ["s", "slow-l", "slow-r"]);
}

#[tokio::test]
async fn a_raising_function_fails_the_dag_and_nothing_is_written() {
    let mut h = harness(2).await;
    let out = h.run(2, &["a", "boom"], &[("a", "boom")], &[]).await;
    match out {
        pb::dag_done::Result::Error(e) => {
            assert_eq!(e.code(), pb::ErrorCode::FunctionRaised);
            assert_eq!(e.function, "boom");
            assert!(e.traceback.contains("ValueError: boom"));
        }
        other => panic!("{other:?}"),
    }
    assert!(h.data.commits.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_function_whose_executor_dies_runs_again_elsewhere() {
    let mut h = harness(2).await;
    let out = h
        .run(3, &["flaky"], &[], &[("flaky", args(&[val("1")]))])
        .await;
    assert_eq!(value(out), "flaky(1)");
    // With one executor left, runs go on.
    let out = h.run(4, &["f"], &[], &[]).await;
    assert_eq!(value(out), "f()");
}
