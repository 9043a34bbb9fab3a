//! The scheduler: clients and compute hosts connect to one port.
//!
//! A client registers functions and DAGs (stored through the [`Registry`]) and calls them;
//! each call becomes a *run*, placed on a host by the [`Placement`] (protocol CT: the whole
//! DAG on one host) and sent to it as a [`pb::RunDag`]; the host's [`pb::DagDone`] is the
//! answer. A run waits in a bounded queue while no host is connected. A host whose
//! connection drops has its runs placed again elsewhere (at least once, at most
//! [`SchedulerConfig::max_attempts`] times). Every call has a timeout.
//!
//! The scheduler publishes its address in the store's OR-set [`crate::SCHEDULERS_KEY`]
//! while it runs, so the SDK can find it from the store's address.

mod gc;
pub mod lease;
mod spread;
mod stats;

pub use stats::{SchedulerStats, StatsHandle, CALL_BUCKETS_S};

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::conn;
use crate::distributed::Spread;
use crate::error::{pb_error, FaasError};
use crate::pb;
use crate::placement::{HostId, Placement};
use crate::registry::Registry;

/// A scheduler's settings.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Timeout of a call that does not set one (default 60 s).
    pub default_timeout: Duration,
    /// Longest timeout a call may ask for (default 1 h).
    pub max_timeout: Duration,
    /// Hosts a run may be placed on before it fails because they keep failing (default 3).
    pub max_attempts: u32,
    /// Runs waiting for a host, at most (default 10 000): beyond, calls fail UNAVAILABLE.
    pub max_queue: usize,
    /// Runs in progress (waiting or running), at most (default 100 000): beyond, calls
    /// fail UNAVAILABLE at once.
    pub max_runs: usize,
    /// Keys the data-locality map remembers (default 100 000).
    pub locality_keys: usize,
    /// Dependency-metadata GC: a round every this often over the caching hosts of this
    /// scheduler (`None`: off; the library's default, while the command line's is
    /// [`DEFAULT_DEP_GC_PERIOD`]). Rounds run only while no other scheduler holds a lease
    /// on the store ([`lease`]); still assumed: every causal cache reading this store's
    /// keys is a host of some scheduler of the store (docs/serverless.md).
    pub dep_gc_period: Option<Duration>,
    /// How often this scheduler renews its lease on the store (default 1 s).
    pub heartbeat: Duration,
    /// How long another scheduler whose heartbeat does not move still counts as live
    /// (default 10 s).
    pub lease: Duration,
}

/// The dependency-GC period `latticekv faas scheduler` and `latticekv local --faas` use
/// unless told otherwise (docs/serverless.md, "Dependency-metadata GC": why 200 ms).
pub const DEFAULT_DEP_GC_PERIOD: Duration = Duration::from_millis(200);

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            default_timeout: Duration::from_secs(60),
            max_timeout: Duration::from_secs(3600),
            max_attempts: 3,
            max_queue: 10_000,
            max_runs: 100_000,
            locality_keys: crate::placement::DEFAULT_LOCALITY_KEYS,
            dep_gc_period: None,
            heartbeat: Duration::from_secs(1),
            lease: Duration::from_secs(10),
        }
    }
}

/// The protocol a call asks for, with the default resolved for `caches` connected compute
/// hosts with a causal cache: HB (the DAG spread over hosts) with two or more, CT
/// otherwise (one host, or hosts on the bare store, which gain nothing from spreading).
pub fn effective_protocol(p: pb::Protocol, caches: usize) -> pb::Protocol {
    match p {
        pb::Protocol::Default if caches >= 2 => pb::Protocol::Hb,
        pb::Protocol::Default => pb::Protocol::Ct,
        other => other,
    }
}

/// Messages to one connection.
type Out = mpsc::Sender<pb::FromScheduler>;

/// A call in progress.
struct Run {
    msg: pb::RunDag,
    keys: Vec<Bytes>,
    /// Where the answer goes: the client's connection and its request id.
    reply: (Out, u64),
    host: Option<HostId>,
    /// Hosts that failed while running it.
    failures: u32,
    /// Protocol OPT: the DAG spread over hosts (`None`: CT, the whole DAG on `host`).
    spread: Option<Spread>,
    /// When it was admitted (the metrics' call duration).
    started: std::time::Instant,
    /// Aborts and metadata so far, answered with the result.
    stats: pb::CallStats,
}

#[derive(Default)]
struct State {
    placement: Placement,
    hosts: HashMap<HostId, Out>,
    /// Each host's cache (id, fetch address), for OPT's cache-to-cache fetches.
    caches: HashMap<HostId, pb::CachePeer>,
    runs: HashMap<u64, Run>,
    queue: VecDeque<u64>,
    next_run: u64,
    next_conn: u64,
    /// Counters for the metrics.
    stats: SchedulerStats,
    /// The dependency-GC round waiting for reports.
    gc: Option<gc::Waiting>,
    /// Commit markers of ended calls, for the task deleting them from the store.
    ended_markers: Option<mpsc::Sender<String>>,
}

/// Commit markers waiting to be deleted, at most; beyond, a marker is left in the store.
const MARKERS_QUEUED: usize = 10_000;

/// Messages to send once the state's lock is released.
type Outbox = Vec<(Out, pb::FromScheduler)>;

fn response(
    id: u64,
    result: pb::client_response::Result,
    stats: Option<pb::CallStats>,
) -> pb::FromScheduler {
    pb::FromScheduler {
        msg: Some(pb::from_scheduler::Msg::Response(pb::ClientResponse {
            id,
            result: Some(result),
            stats,
        })),
    }
}

struct Shared {
    config: SchedulerConfig,
    /// This scheduler's id in the store's [`lease::LEASES_KEY`].
    id: String,
    registry: Registry,
    state: Mutex<State>,
    /// Connected compute hosts, for [`Scheduler::hosts`].
    hosts: watch::Sender<usize>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn deliver(outbox: Outbox) {
    for (out, msg) in outbox {
        let _ = out.send(msg).await;
    }
}

impl State {
    /// Sends run `id` to a host, or queues it.
    fn dispatch(&mut self, id: u64, max_queue: usize, outbox: &mut Outbox) {
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        if run.spread.is_some() && !self.hosts.is_empty() {
            self.dispatch_spread(id, outbox);
            return;
        }
        match self.placement.place(&run.keys) {
            Some(host) => {
                let Some(out) = self.hosts.get(&host) else {
                    return;
                };
                run.host = Some(host);
                outbox.push((
                    out.clone(),
                    pb::FromScheduler {
                        msg: Some(pb::from_scheduler::Msg::RunDag(run.msg.clone())),
                    },
                ));
            }
            None if self.queue.len() < max_queue => {
                run.host = None;
                self.queue.push_back(id);
            }
            None => self.finish(
                id,
                pb::client_response::Result::Error(pb_error(
                    pb::ErrorCode::Unavailable,
                    format!("no compute host, and {max_queue} calls already wait for one"),
                )),
                outbox,
            ),
        }
    }

    /// Ends run `id` with `result`.
    fn finish(&mut self, id: u64, result: pb::client_response::Result, outbox: &mut Outbox) {
        let Some(mut run) = self.runs.remove(&id) else {
            return;
        };
        match &run.host {
            Some(h) => self.placement.finished(h),
            None => self.queue.retain(|q| *q != id),
        }
        if let Some(spread) = run.spread.as_mut() {
            run.stats.attempts = spread.attempts();
            self.end_attempt(spread, outbox);
        }
        if let Some(tx) = &self.ended_markers {
            // No run of the call commits any more: its marker has done its work.
            let _ = tx.try_send(std::mem::take(&mut run.msg.commit_marker));
        }
        self.stats
            .call(run.msg.protocol, &result, run.started.elapsed());
        run.stats.protocol = run.msg.protocol;
        let (out, req) = run.reply;
        outbox.push((out, response(req, result, Some(run.stats))));
    }
}

/// A bound scheduler, ready to [`serve`](Scheduler::serve).
pub struct Scheduler {
    listener: TcpListener,
    shared: Arc<Shared>,
    store: client::Client,
    /// Commit markers of ended calls, deleted by a task of [`Scheduler::serve`].
    ended_markers: mpsc::Receiver<String>,
}

impl Scheduler {
    /// Binds `listen` (loopback only: see [`crate::check_loopback`]) and publishes the
    /// address in the store's [`crate::SCHEDULERS_KEY`], so clients can find it as soon as
    /// this returns.
    ///
    /// # Errors
    /// A non-loopback address, the bind failing, or the store refusing the address.
    pub async fn bind(
        listen: SocketAddr,
        store: client::Client,
        config: SchedulerConfig,
    ) -> Result<Scheduler, FaasError> {
        crate::check_loopback(&listen).map_err(|e| FaasError::Connection {
            addr: listen.to_string(),
            reason: e,
        })?;
        let io = |e: std::io::Error| FaasError::Connection {
            addr: listen.to_string(),
            reason: e.to_string(),
        };
        let listener = TcpListener::bind(listen).await.map_err(io)?;
        let addr = listener.local_addr().map_err(io)?.to_string();
        // The lease first: a peer running GC rounds stops before this scheduler's hosts
        // can read anything.
        let id = lease::new_id();
        lease::register(&store, &id).await?;
        store
            .set_add(crate::SCHEDULERS_KEY, [addr.as_bytes()])
            .await?;
        let (markers_tx, ended_markers) = mpsc::channel(MARKERS_QUEUED);
        let shared = Arc::new(Shared {
            id,
            registry: Registry::new(store.clone()),
            state: Mutex::new(State {
                placement: Placement::new(config.locality_keys),
                ended_markers: Some(markers_tx),
                ..State::default()
            }),
            config,
            hosts: watch::Sender::new(0),
        });
        Ok(Scheduler {
            listener,
            shared,
            store,
            ended_markers,
        })
    }

    /// The number of connected compute hosts, as it changes (tests and tools wait on it).
    pub fn hosts(&self) -> watch::Receiver<usize> {
        self.shared.hosts.subscribe()
    }

    /// A handle on its counters, valid while it serves.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle(self.shared.clone())
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` becomes true, then withdraws the address from the store.
    ///
    /// # Errors
    /// None today (the signature leaves room for a failing listener).
    pub async fn serve(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), FaasError> {
        let addr = self
            .listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let markers = std::mem::replace(&mut self.ended_markers, mpsc::channel(1).1);
        let deleter = tokio::spawn(delete_markers(self.store.clone(), markers));
        let heartbeat = tokio::spawn(lease::renew(
            self.store.clone(),
            self.shared.id.clone(),
            self.shared.config.heartbeat,
        ));
        if let Some(period) = self.shared.config.dep_gc_period {
            tokio::spawn(gc::run(
                self.shared.clone(),
                self.store.clone(),
                period,
                shutdown.clone(),
            ));
        }
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(serve_conn(stream, self.shared.clone()));
                    }
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = shutdown.wait_for(|s| *s) => break,
            }
        }
        heartbeat.abort();
        deleter.abort();
        let _ = self
            .store
            .set_remove(crate::SCHEDULERS_KEY, [addr.as_bytes()])
            .await;
        lease::withdraw(&self.store, &self.shared.id).await;
        Ok(())
    }

    /// This scheduler's id in the store's [`lease::LEASES_KEY`].
    pub fn id(&self) -> &str {
        &self.shared.id
    }
}

/// Deletes the commit markers of ended calls (errors ignored: a marker left behind costs a
/// key, nothing else).
async fn delete_markers(store: client::Client, mut markers: mpsc::Receiver<String>) {
    while let Some(m) = markers.recv().await {
        if !m.is_empty() {
            let _ = store.delete(&m).await;
        }
    }
}

async fn serve_conn(stream: TcpStream, shared: Arc<Shared>) {
    let (mut r, w) = stream.into_split();
    let out = conn::writer::<pb::FromScheduler, _>(w, 1024);
    let first = match conn::read::<pb::ToScheduler, _>(&mut r).await {
        Ok(Some(m)) => m,
        _ => return,
    };
    if let Some(pb::to_scheduler::Msg::HostHello(hello)) = first.msg {
        serve_host(hello, r, out, shared).await;
        return;
    }
    let mut next = Some(first);
    loop {
        let msg = match next.take() {
            Some(m) => m,
            None => match conn::read::<pb::ToScheduler, _>(&mut r).await {
                Ok(Some(m)) => m,
                _ => return,
            },
        };
        match msg.msg {
            Some(pb::to_scheduler::Msg::Request(req)) => {
                tokio::spawn(handle_request(req, out.clone(), shared.clone()));
            }
            _ => {
                // Only requests on a client connection: end it (mini-redis's rule: a bad
                // peer ends its own connection, nothing else).
                tracing::warn!("a client connection sent a host message; closing it");
                return;
            }
        }
    }
}

/// A host's connection: register it, take its loads and results; on disconnect, place its
/// runs again.
async fn serve_host(
    hello: pb::HostHello,
    mut r: tokio::net::tcp::OwnedReadHalf,
    out: Out,
    shared: Arc<Shared>,
) {
    let mut outbox = Outbox::new();
    let host = {
        let mut st = shared.lock();
        st.next_conn += 1;
        let mut host = hello.host_id.clone();
        if host.is_empty() || st.hosts.contains_key(&host) {
            host = format!("{}#{}", hello.host_id, st.next_conn);
        }
        st.placement.add_host(&host, hello.executors);
        st.hosts.insert(host.clone(), out);
        if hello.cache_id != 0 && !hello.cache_addr.is_empty() {
            if let Some(w) = st.gc.take() {
                w.abandon(); // the round's reports cannot count this cache
            }
            st.caches.insert(
                host.clone(),
                pb::CachePeer {
                    cache_id: hello.cache_id,
                    addr: hello.cache_addr.clone(),
                },
            );
        }
        shared.hosts.send_replace(st.hosts.len());
        let queued: Vec<u64> = st.queue.drain(..).collect();
        for id in queued {
            st.dispatch(id, shared.config.max_queue, &mut outbox);
        }
        host
    };
    tracing::info!(%host, executors = hello.executors, "compute host connected");
    deliver(outbox).await;
    loop {
        let msg = match conn::read::<pb::ToScheduler, _>(&mut r).await {
            Ok(Some(m)) => m,
            _ => break,
        };
        let mut outbox = Outbox::new();
        match msg.msg {
            Some(pb::to_scheduler::Msg::Load(l)) => {
                shared
                    .lock()
                    .placement
                    .report(&host, l.running_dags, l.executors);
            }
            Some(pb::to_scheduler::Msg::DagDone(done)) => {
                let mut st = shared.lock();
                // A run placed again elsewhere meanwhile is not this host's to answer.
                if st.runs.get(&done.run_id).and_then(|r| r.host.as_deref()) == Some(&host) {
                    let result = match done.result {
                        Some(pb::dag_done::Result::Value(v)) => {
                            pb::client_response::Result::Value(v)
                        }
                        Some(pb::dag_done::Result::Error(e)) => {
                            pb::client_response::Result::Error(e)
                        }
                        None => pb::client_response::Result::Error(pb_error(
                            pb::ErrorCode::Unavailable,
                            "the host sent an empty result",
                        )),
                    };
                    st.finish(done.run_id, result, &mut outbox);
                }
            }
            // MTCC across hosts (OPT).
            Some(pb::to_scheduler::Msg::FnDone(done)) => {
                shared.lock().fn_done(&host, done, &mut outbox);
            }
            Some(pb::to_scheduler::Msg::ConSnapshot(snap)) => {
                shared.lock().con_snapshot(&host, snap, &mut outbox);
            }
            Some(pb::to_scheduler::Msg::HbView(view)) => {
                shared.lock().hb_view(&host, view, &mut outbox);
            }
            Some(pb::to_scheduler::Msg::GcReport(r)) => {
                if let Some(w) = shared.lock().gc.as_mut() {
                    w.report(&host, &r);
                }
            }
            _ => {}
        }
        deliver(outbox).await;
    }
    tracing::warn!(%host, "compute host disconnected; placing its calls again");
    let mut outbox = Outbox::new();
    {
        let mut st = shared.lock();
        st.placement.remove_host(&host);
        st.hosts.remove(&host);
        if st.caches.remove(&host).is_some() {
            if let Some(w) = st.gc.take() {
                w.abandon();
            }
        }
        shared.hosts.send_replace(st.hosts.len());
        st.host_lost_spread(&host, shared.config.max_attempts, &mut outbox);
        let orphans: Vec<u64> = st
            .runs
            .iter()
            .filter(|(_, r)| r.host.as_deref() == Some(&host))
            .map(|(id, _)| *id)
            .collect();
        for id in orphans {
            let Some(run) = st.runs.get_mut(&id) else {
                continue;
            };
            run.host = None;
            run.failures += 1;
            if run.failures >= shared.config.max_attempts {
                let failures = run.failures;
                st.finish(
                    id,
                    pb::client_response::Result::Error(pb_error(
                        pb::ErrorCode::Unavailable,
                        format!("{failures} compute hosts failed while running the call"),
                    )),
                    &mut outbox,
                );
            } else {
                st.stats.retries += 1;
                st.dispatch(id, shared.config.max_queue, &mut outbox);
            }
        }
    }
    deliver(outbox).await;
}

fn error_result(e: FaasError) -> pb::client_response::Result {
    pb::client_response::Result::Error(e.to_pb())
}

async fn handle_request(req: pb::ClientRequest, out: Out, shared: Arc<Shared>) {
    let id = req.id;
    let ok = |()| pb::client_response::Result::Ok(pb::Ok {});
    // `None`: a started run, answered later (by its host or its timeout).
    let answer: Option<Result<pb::client_response::Result, FaasError>> = match req.op {
        Some(pb::client_request::Op::RegisterFunction(f)) => Some(
            shared
                .registry
                .register_function(&f.name, f.code)
                .await
                .map(ok),
        ),
        Some(pb::client_request::Op::RegisterDag(d)) => Some(
            shared
                .registry
                .register_dag(d.dag.unwrap_or_default())
                .await
                .map(ok),
        ),
        Some(pb::client_request::Op::Call(call)) => {
            let protocol = call.protocol();
            let dag = crate::dag::single(&call.function);
            let args = [(call.function.clone(), call.args.unwrap_or_default())]
                .into_iter()
                .collect();
            let reply = (out.clone(), id);
            start_run(&shared, dag, args, protocol, call.timeout_ms, reply)
                .await
                .err()
                .map(Err)
        }
        Some(pb::client_request::Op::CallDag(call)) => {
            let protocol = call.protocol();
            match shared.registry.dag(&call.dag).await {
                Ok(dag) => {
                    let reply = (out.clone(), id);
                    start_run(&shared, dag, call.args, protocol, call.timeout_ms, reply)
                        .await
                        .err()
                        .map(Err)
                }
                Err(e) => Some(Err(e)),
            }
        }
        None => Some(Err(FaasError::remote(
            pb::ErrorCode::BadRequest,
            "an empty request",
        ))),
    };
    if let Some(a) = answer {
        let _ = out
            .send(response(id, a.unwrap_or_else(error_result), None))
            .await;
    }
}

/// Checks a call, builds its run and dispatches it; the answer comes from the host or the
/// timeout.
async fn start_run(
    shared: &Arc<Shared>,
    dag: pb::Dag,
    args: std::collections::BTreeMap<String, pb::Args>,
    protocol: pb::Protocol,
    timeout_ms: u32,
    reply: (Out, u64),
) -> Result<(), FaasError> {
    let caches = shared.lock().caches.len();
    let protocol = effective_protocol(protocol, caches);
    let plan = crate::dag::validate(&dag).map_err(|e| {
        FaasError::remote(
            pb::ErrorCode::BadRequest,
            format!("DAG {:?}: {e}", dag.name),
        )
    })?;
    if let Some(f) = args.keys().find(|f| !dag.functions.contains(f)) {
        return Err(FaasError::remote(
            pb::ErrorCode::BadRequest,
            format!(
                "arguments for {f:?}, which is not a function of DAG {:?}",
                dag.name
            ),
        ));
    }
    let mut code = std::collections::BTreeMap::new();
    for f in &dag.functions {
        code.insert(f.clone(), shared.registry.function(f).await?);
    }
    let mut keys = Vec::new();
    for a in args.values().flat_map(|a| a.args.iter()) {
        match &a.kind {
            Some(pb::arg::Kind::KeyRef(k)) => keys.push(k.clone()),
            Some(pb::arg::Kind::Value(_)) => {}
            None => {
                return Err(FaasError::remote(
                    pb::ErrorCode::BadRequest,
                    "an argument with neither a value nor a key reference",
                ))
            }
        }
    }
    let timeout = match timeout_ms {
        0 => shared.config.default_timeout,
        ms => Duration::from_millis(u64::from(ms)).min(shared.config.max_timeout),
    };
    let mut outbox = Outbox::new();
    let run_id = {
        let mut st = shared.lock();
        if st.runs.len() >= shared.config.max_runs {
            return Err(FaasError::remote(
                pb::ErrorCode::Unavailable,
                format!(
                    "{} calls are already in progress at this scheduler",
                    shared.config.max_runs
                ),
            ));
        }
        st.next_run += 1;
        let run_id = st.next_run;
        let spread = match protocol {
            pb::Protocol::Opt => Some(Spread::new(run_id, plan)),
            pb::Protocol::Con => {
                let keys = crate::distributed::dag_msg_keys(&args, &plan);
                Some(Spread::con(run_id, plan, keys))
            }
            pb::Protocol::Hb => {
                let keys = crate::distributed::dag_msg_keys(&args, &plan);
                Some(Spread::hb(run_id, plan, keys))
            }
            _ => None,
        };
        st.runs.insert(
            run_id,
            Run {
                msg: pb::RunDag {
                    run_id,
                    dag: Some(dag),
                    code,
                    args,
                    protocol: protocol as i32,
                    timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
                    commit_marker: format!(
                        "{}{}/{run_id}",
                        crate::data::COMMIT_MARKER_PREFIX,
                        shared.id
                    ),
                },
                keys,
                reply,
                host: None,
                failures: 0,
                spread,
                started: std::time::Instant::now(),
                stats: pb::CallStats {
                    attempts: 1,
                    ..Default::default()
                },
            },
        );
        st.dispatch(run_id, shared.config.max_queue, &mut outbox);
        run_id
    };
    deliver(outbox).await;
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(timeout).await;
        let mut outbox = Outbox::new();
        {
            let mut st = shared.lock();
            if let Some(run) = st.runs.get(&run_id) {
                let e = if run.host.is_none() && st.hosts.is_empty() {
                    pb_error(
                        pb::ErrorCode::NoExecutors,
                        format!("no compute host connected within {timeout:?}"),
                    )
                } else {
                    pb_error(
                        pb::ErrorCode::Timeout,
                        format!("the call did not finish within {timeout:?}"),
                    )
                };
                st.finish(run_id, pb::client_response::Result::Error(e), &mut outbox);
            }
        }
        deliver(outbox).await;
    });
    Ok(())
}
