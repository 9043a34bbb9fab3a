//! A compute host: N Python executor processes, a link to the scheduler, and the DAG runs
//! the scheduler sends it.
//!
//! The host listens on loopback for its executors (`python3 -m latticekv.faas.executor
//! --host ADDR --id N`), restarts one that exits, and kills them when it exits (they get
//! SIGTERM from the kernel if the host dies, `PR_SET_PDEATHSIG`). Each executor process gets
//! a shared region of its own ([`crate::shm`], [`HostConfig::executor_shm`]) for large
//! tasks and results; the socket carries the rest. For each [`pb::RunDag`]
//! it reads the key references through its [`DataPlane`], runs the functions in
//! topological order on free executors (independent branches in parallel), passes results
//! along edges, buffers every function's writes and commits them after the sink, then
//! answers [`pb::DagDone`]. A task whose executor dies is run again on another one (at most
//! [`HostConfig::task_attempts`] times).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::conn;
use crate::data::DataPlane;
use crate::error::{pb_error, FaasError};
use crate::executors::{self, Executors};
use crate::pb;

/// A host's settings.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// The scheduler's address.
    pub scheduler: String,
    /// Executor processes to run (default 3, as in the paper).
    pub executors: u32,
    /// The Python interpreter running the executors (default `python3`); it must have the
    /// `latticekv` package installed.
    pub python: String,
    /// This host's id, as the scheduler sees it.
    pub host_id: String,
    /// Where executors connect (loopback; port 0: any free port).
    pub executor_listen: SocketAddr,
    /// How often the host reports its load.
    pub load_period: Duration,
    /// Runs of one function before a DAG fails because its executors keep dying.
    pub task_attempts: u32,
    /// Where the host's causal cache answers other caches' fetches of pinned versions
    /// (protocol OPT; loopback, port 0: any free port). Unused without a cache.
    pub cache_listen: SocketAddr,
    /// Bytes of the shared region each executor process gets for large tasks and results
    /// (`faas::shm`; 0: none, everything crosses the socket). Default: the frame limit, or
    /// `LATTICEKV_EXECUTOR_SHM_MB` from the environment. The memory is used only as far as
    /// messages reach into it.
    pub executor_shm: usize,
}

/// [`HostConfig::executor_shm`]'s default: `LATTICEKV_EXECUTOR_SHM_MB` MiB if set (0
/// turns the regions off), else [`conn::MAX_FRAME`].
fn default_executor_shm() -> usize {
    std::env::var("LATTICEKV_EXECUTOR_SHM_MB")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(conn::MAX_FRAME, |mb| mb.saturating_mul(1 << 20))
}

impl HostConfig {
    /// Defaults for a host of `scheduler`.
    pub fn new(scheduler: impl Into<String>) -> HostConfig {
        HostConfig {
            scheduler: scheduler.into(),
            executors: 3,
            python: "python3".into(),
            host_id: format!("host-{}", std::process::id()),
            executor_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            load_period: Duration::from_millis(500),
            task_attempts: 3,
            cache_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            executor_shm: default_executor_shm(),
        }
    }
}

/// What every run shares.
struct Shared {
    config: HostConfig,
    executors: Arc<Executors>,
    data: Arc<dyn DataPlane>,
    running: AtomicU32,
    next_task: AtomicU64,
    /// The cache's fetch port, announced in the hello (`None`: no causal cache).
    cache_addr: Option<SocketAddr>,
}

/// Runs a host until `shutdown` becomes true: executors, the executor listener and the
/// scheduler link (reconnected when it breaks).
///
/// # Errors
/// The executor listener cannot be bound.
pub async fn run(
    config: HostConfig,
    data: Arc<dyn DataPlane>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(config.executor_listen).await?;
    let executor_addr = listener.local_addr()?;
    let mut tasks = JoinSet::new();
    let cache_addr = match data.opt() {
        Some(_) => {
            crate::check_loopback(&config.cache_listen)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            let peers = TcpListener::bind(config.cache_listen).await?;
            let addr = peers.local_addr()?;
            tasks.spawn(crate::peer::serve(peers, data.clone()));
            Some(addr)
        }
        None => None,
    };
    let executors = Arc::new(Executors::new(
        config.python.clone(),
        config.executor_shm,
        config.task_attempts,
    ));
    let shared = Arc::new(Shared {
        config,
        executors,
        data,
        running: AtomicU32::new(0),
        next_task: AtomicU64::new(1),
        cache_addr,
    });
    tasks.spawn(executors::accept(listener, shared.executors.clone()));
    for id in 0..shared.config.executors {
        tasks.spawn(executors::supervise(
            shared.executors.clone(),
            executor_addr,
            id,
            shutdown.clone(),
        ));
    }
    tasks.spawn(scheduler_link(shared.clone(), shutdown.clone()));
    let _ = shutdown.wait_for(|s| *s).await;
    // The supervisors kill their processes on shutdown; give them a moment.
    let endless = 1 + usize::from(shared.cache_addr.is_some()); // acceptors never end
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while tasks.len() > endless {
            tasks.join_next().await;
        }
    })
    .await;
    tasks.abort_all();
    Ok(())
}

/// Resolves when `shutdown` becomes true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Connects to the scheduler, says hello, reports load, runs what it sends; reconnects
/// when the connection breaks.
async fn scheduler_link(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        if *shutdown.borrow() {
            return;
        }
        match TcpStream::connect(&shared.config.scheduler).await {
            Ok(stream) => {
                backoff = Duration::from_millis(100);
                let _ = stream.set_nodelay(true);
                tokio::select! {
                    () = serve_scheduler(stream, shared.clone()) => {
                        tracing::warn!(scheduler = %shared.config.scheduler, "scheduler connection lost; reconnecting");
                    }
                    () = stopped(&mut shutdown) => return,
                }
            }
            Err(e) => {
                tracing::warn!(scheduler = %shared.config.scheduler, "cannot reach the scheduler: {e}");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            () = stopped(&mut shutdown) => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

fn load(shared: &Shared) -> pb::ToScheduler {
    pb::ToScheduler {
        msg: Some(pb::to_scheduler::Msg::Load(pb::Load {
            running_dags: shared.running.load(Ordering::Relaxed),
            busy_executors: shared.executors.busy(),
            executors: shared.config.executors,
        })),
    }
}

async fn serve_scheduler(stream: TcpStream, shared: Arc<Shared>) {
    let (mut r, w) = stream.into_split();
    let out = conn::writer::<pb::ToScheduler, _>(w, 1024);
    // Whatever the cache held while no scheduler could count it in a GC round goes.
    if let Some(o) = shared.data.opt() {
        o.forget();
    }
    let hello = pb::ToScheduler {
        msg: Some(pb::to_scheduler::Msg::HostHello(pb::HostHello {
            host_id: shared.config.host_id.clone(),
            executors: shared.config.executors,
            cache_addr: shared.cache_addr.map(|a| a.to_string()).unwrap_or_default(),
            cache_id: shared.data.opt().map_or(0, |o| o.cache_id().0),
        })),
    };
    if out.send(hello).await.is_err() {
        return;
    }
    let reporter = {
        let (out, shared) = (out.clone(), shared.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(shared.config.load_period);
            loop {
                tick.tick().await;
                if out.send(load(&shared)).await.is_err() {
                    return;
                }
            }
        })
    };
    // Runs of this connection: aborted if it breaks (the scheduler runs them elsewhere).
    let mut runs = JoinSet::new();
    loop {
        tokio::select! {
            msg = conn::read::<pb::FromScheduler, _>(&mut r) => match msg {
                Ok(Some(pb::FromScheduler { msg: Some(pb::from_scheduler::Msg::RunDag(run)) })) => {
                    let (out, shared) = (out.clone(), shared.clone());
                    runs.spawn(async move {
                        shared.running.fetch_add(1, Ordering::Relaxed);
                        let run_id = run.run_id;
                        // Whatever ends the run (answer, error, timeout, or this task
                        // aborted with the scheduler link), the data plane releases it.
                        let _release = Release(shared.data.clone(), run_id);
                        let limit = match run.timeout_ms {
                            0 => Duration::MAX,
                            ms => Duration::from_millis(u64::from(ms)),
                        };
                        // Past the call's timeout its caller has its answer: stop using
                        // executors for it (an executor running a function finishes it).
                        let outcome = tokio::time::timeout(limit, run_dag(&shared, run))
                            .await
                            .unwrap_or_else(|_| {
                                Err(error(pb::ErrorCode::Timeout, "the call timed out"))
                            });
                        let result = match outcome {
                            Ok(v) => pb::dag_done::Result::Value(v),
                            Err(e) => pb::dag_done::Result::Error(e.to_pb()),
                        };
                        shared.running.fetch_sub(1, Ordering::Relaxed);
                        let done = pb::ToScheduler {
                            msg: Some(pb::to_scheduler::Msg::DagDone(pb::DagDone {
                                run_id,
                                result: Some(result),
                            })),
                        };
                        let _ = out.send(done).await;
                    });
                }
                // MTCC across hosts (OPT).
                Ok(Some(pb::FromScheduler { msg: Some(pb::from_scheduler::Msg::RunFn(step)) })) => {
                    let (out, shared) = (out.clone(), shared.clone());
                    runs.spawn(async move {
                        shared.running.fetch_add(1, Ordering::Relaxed);
                        let done = crate::fnrun::run_fn(&shared.data, step, |mut task| {
                            task.id = shared.next_task.fetch_add(1, Ordering::Relaxed);
                            shared.executors.run(task)
                        })
                        .await;
                        shared.running.fetch_sub(1, Ordering::Relaxed);
                        let done = pb::ToScheduler { msg: Some(pb::to_scheduler::Msg::FnDone(done)) };
                        let _ = out.send(done).await;
                    });
                }
                Ok(Some(pb::FromScheduler { msg: Some(pb::from_scheduler::Msg::Release(r)) })) => {
                    shared.data.release(r.attempt);
                }
                Ok(Some(pb::FromScheduler { msg: Some(pb::from_scheduler::Msg::Prefetch(p)) })) => {
                    let shared = shared.clone();
                    runs.spawn(async move {
                        if let Some(o) = shared.data.opt() {
                            o.prefetch(p.keys.iter().map(|k| cache::Key::from(&k[..])).collect()).await;
                        }
                    });
                }
                Ok(Some(pb::FromScheduler { msg: Some(pb::from_scheduler::Msg::HbQuery(q)) })) => {
                    let view = crate::fnrun::hb_query(&shared.data, q);
                    let msg = pb::ToScheduler { msg: Some(pb::to_scheduler::Msg::HbView(view)) };
                    let _ = out.send(msg).await;
                }
                Ok(Some(pb::FromScheduler { msg: Some(pb::from_scheduler::Msg::ConPrepare(p)) })) => {
                    let (out, shared) = (out.clone(), shared.clone());
                    runs.spawn(async move {
                        let snap = crate::fnrun::con_prepare(&shared.data, p).await;
                        let msg = pb::ToScheduler { msg: Some(pb::to_scheduler::Msg::ConSnapshot(snap)) };
                        let _ = out.send(msg).await;
                    });
                }
                Ok(Some(pb::FromScheduler { msg: Some(pb::from_scheduler::Msg::GcProbe(p)) })) => {
                    let (out, shared) = (out.clone(), shared.clone());
                    runs.spawn(async move {
                        let msg = pb::ToScheduler { msg: Some(pb::to_scheduler::Msg::GcReport(gc_report(&shared, p.round).await)) };
                        let _ = out.send(msg).await;
                    });
                }
                Ok(Some(pb::FromScheduler { msg: Some(pb::from_scheduler::Msg::GcStable(st)) })) => {
                    if let (Some(o), Some(clocks)) = (shared.data.opt(), crate::gc::clocks_from_pb(&st.stable)) {
                        o.gc_stable(&clocks.into_iter().collect());
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            },
            Some(_) = runs.join_next(), if !runs.is_empty() => {}
        }
    }
    reporter.abort();
    runs.abort_all();
}

/// Releases a run's data-plane state when dropped.
struct Release(Arc<dyn DataPlane>, u64);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.release(self.1);
    }
}

fn error(code: pb::ErrorCode, message: impl Into<String>) -> FaasError {
    FaasError::from_pb(pb_error(code, message))
}

/// Runs one DAG; the sink's pickled result.
async fn run_dag(shared: &Arc<Shared>, run: pb::RunDag) -> Result<Bytes, FaasError> {
    let dag = run.dag.clone().unwrap_or_default();
    let plan = crate::dag::validate(&dag).map_err(|e| {
        error(
            pb::ErrorCode::BadRequest,
            format!("DAG {:?}: {e}", dag.name),
        )
    })?;
    if !matches!(run.protocol(), pb::Protocol::Default | pb::Protocol::Ct) {
        return Err(error(
            pb::ErrorCode::NotImplemented,
            "a whole DAG on one host runs protocol CT only (OPT comes as RunFn)",
        ));
    }
    // The read set, read once for the whole DAG (CT: one snapshot).
    let mut keys: Vec<Bytes> = Vec::new();
    let mut seen = HashSet::new();
    for args in run.args.values() {
        for a in &args.args {
            if let Some(pb::arg::Kind::KeyRef(k)) = &a.kind {
                if seen.insert(k.clone()) {
                    keys.push(k.clone());
                }
            }
        }
    }
    let reads: HashMap<Bytes, pb::KeyRead> = if keys.is_empty() {
        HashMap::new()
    } else {
        shared
            .data
            .snapshot(run.run_id, keys)
            .await
            .map_err(|e| {
                error(
                    pb::ErrorCode::Unavailable,
                    format!("reading key references: {e}"),
                )
            })?
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect()
    };
    let mut results: BTreeMap<String, Bytes> = BTreeMap::new();
    let mut writes: Vec<pb::Write> = Vec::new();
    let mut started: HashSet<String> = HashSet::new();
    let mut tasks: JoinSet<(String, Result<pb::TaskDone, FaasError>)> = JoinSet::new();
    loop {
        for f in &plan.order {
            let ups = &plan.upstream[f];
            if started.contains(f) || !ups.iter().all(|u| results.contains_key(u)) {
                continue;
            }
            started.insert(f.clone());
            let mut args: Vec<pb::TaskArg> = ups
                .iter()
                .map(|u| pb::TaskArg {
                    kind: Some(pb::task_arg::Kind::Upstream(results[u].clone())),
                })
                .collect();
            for a in run.args.get(f).map(|a| a.args.as_slice()).unwrap_or(&[]) {
                let kind = match &a.kind {
                    Some(pb::arg::Kind::Value(v)) => pb::task_arg::Kind::Value(v.clone()),
                    Some(pb::arg::Kind::KeyRef(k)) => {
                        pb::task_arg::Kind::Key(reads.get(k).cloned().unwrap_or_else(|| {
                            pb::KeyRead {
                                key: k.clone(),
                                ..Default::default()
                            }
                        }))
                    }
                    None => return Err(error(pb::ErrorCode::BadRequest, "an empty argument")),
                };
                args.push(pb::TaskArg { kind: Some(kind) });
            }
            let task = pb::Task {
                id: shared.next_task.fetch_add(1, Ordering::Relaxed),
                function: f.clone(),
                code: run.code.get(f).cloned().unwrap_or_default(),
                args,
            };
            let shared = shared.clone();
            let name = f.clone();
            tasks.spawn(async move { (name, shared.executors.run(task).await) });
        }
        let Some(joined) = tasks.join_next().await else {
            break;
        };
        let (f, outcome) = joined.map_err(|e| error(pb::ErrorCode::Unavailable, e.to_string()))?;
        let done = outcome?;
        match done.result {
            Some(pb::task_done::Result::Value(v)) => {
                writes.extend(done.writes);
                results.insert(f, v);
            }
            Some(pb::task_done::Result::Traceback(tb)) => {
                let last = tb.trim_end().lines().last().unwrap_or("").to_string();
                return Err(FaasError::Remote {
                    code: pb::ErrorCode::FunctionRaised,
                    message: format!("function {f:?} raised {last}"),
                    traceback: tb,
                    function: f,
                    exception: done.exception,
                });
            }
            None => {
                return Err(error(
                    pb::ErrorCode::Unavailable,
                    format!("function {f:?}: the executor sent no result"),
                ))
            }
        }
    }
    let Some(result) = results.remove(&plan.sink) else {
        return Err(error(pb::ErrorCode::Unavailable, "the sink did not run"));
    };
    if !writes.is_empty() {
        let data = &*shared.data;
        crate::data::commit_once(data, &run.commit_marker, || data.commit(run.run_id, writes))
            .await
            .map_err(|e| {
                error(
                    pb::ErrorCode::Unavailable,
                    format!("writing at the sink: {e}"),
                )
            })?;
    }
    Ok(result)
}

/// This host's answer to a GC probe (declined without a causal cache).
async fn gc_report(shared: &Shared, round: u64) -> pb::GcReport {
    let held = match shared.data.opt() {
        Some(o) => o.gc_report().await,
        None => None,
    };
    match held {
        Some(h) => pb::GcReport {
            round,
            held: crate::gc::clocks_to_pb(h.iter()),
            ok: true,
        },
        None => pb::GcReport {
            round,
            held: Vec::new(),
            ok: false,
        },
    }
}
