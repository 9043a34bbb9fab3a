//! `latticekv faas scheduler`, `latticekv faas host`, and the scheduler and host that
//! `latticekv local --faas` runs beside its node (docs/serverless.md).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use clap::{Args, Subcommand};
use tokio::sync::watch;

/// `latticekv faas …`
#[derive(Args, Debug)]
pub struct FaasArgs {
    #[command(subcommand)]
    command: FaasCommand,
}

#[derive(Subcommand, Debug)]
enum FaasCommand {
    /// Run a scheduler: clients register and call functions and DAGs through it, compute
    /// hosts connect to it.
    Scheduler(SchedulerArgs),
    /// Run a compute host: Python executor processes running what the scheduler sends.
    Host(HostArgs),
}

/// `latticekv faas scheduler`
#[derive(Args, Debug)]
struct SchedulerArgs {
    /// Where clients and hosts connect. Loopback only: the layer has no authentication
    /// yet.
    #[arg(long, env = "LATTICEKV_FAAS_LISTEN", default_value = "127.0.0.1:7800")]
    listen: SocketAddr,
    /// The store (a node's native front address): the registry lives there, and the
    /// scheduler publishes its address there.
    #[arg(long, env = "LATTICEKV_ADDR", default_value = "127.0.0.1:7700")]
    store: String,
    /// Timeout of a call that does not set one, in seconds.
    #[arg(long, default_value_t = 60)]
    call_timeout: u64,
    /// Dependency-metadata GC: a round over this scheduler's caching hosts every this many
    /// milliseconds (0: off). Rounds pause while another scheduler runs on the store
    /// (docs/serverless.md).
    #[arg(long, env = "LATTICEKV_FAAS_DEP_GC_MS", default_value_t = DEFAULT_DEP_GC_MS)]
    dep_gc_ms: u64,
    /// HTTP address for `/metrics` (its `latticekv_faas_*` families) and `/health`; none
    /// by default.
    #[arg(long)]
    http: Option<SocketAddr>,
}

/// `latticekv faas host`
#[derive(Args, Debug)]
struct HostArgs {
    /// The scheduler's address.
    #[arg(
        long,
        env = "LATTICEKV_FAAS_SCHEDULER",
        default_value = "127.0.0.1:7800"
    )]
    scheduler: String,
    /// The store (a node's native front address): key references are read there and
    /// functions' writes go there.
    #[arg(long, env = "LATTICEKV_ADDR", default_value = "127.0.0.1:7700")]
    store: String,
    /// Python executor processes.
    #[arg(long, env = "LATTICEKV_FAAS_EXECUTORS", default_value_t = 3)]
    executors: u32,
    /// The Python interpreter of the executors (it must have the `latticekv` package).
    #[arg(long, env = "LATTICEKV_FAAS_PYTHON", default_value = "python3")]
    python: String,
    /// This host's id (default: `host-<pid>`).
    #[arg(long)]
    id: Option<String>,
    /// HTTP address for `/metrics` (its cache's `latticekv_faas_cache_*` families) and
    /// `/health`; none by default.
    #[arg(long)]
    http: Option<SocketAddr>,
    #[command(flatten)]
    data: DataPlaneArgs,
}

/// How a host reads key references and commits writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DataPlaneKind {
    /// HydroCache: a causal cut with pinned snapshots and causal commits (CT).
    Cache,
    /// No cache: each key read from the store, writes as LWW values one by one (a
    /// baseline without consistency across keys).
    Direct,
    /// A cache per host with no causal protocol (the paper's LWW baseline): keys read
    /// through it, refreshed after `--refresh-ms`; writes as LWW values.
    LwwCache,
}

/// The data-plane settings of a compute host.
#[derive(Args, Debug, Clone)]
pub(crate) struct DataPlaneArgs {
    /// The host's data plane: `cache` (HydroCache), `direct` (no cache) or `lww-cache` (a
    /// cache without causal consistency, the paper's LWW baseline).
    #[arg(
        long,
        env = "LATTICEKV_FAAS_DATA_PLANE",
        value_enum,
        default_value = "cache"
    )]
    pub(crate) data_plane: DataPlaneKind,
    /// The cache's capacity, in MiB.
    #[arg(long, env = "LATTICEKV_FAAS_CACHE_MB", default_value_t = 256)]
    pub(crate) cache_mb: usize,
    /// The period of the cache's store subscriptions (its refresh), in milliseconds; the
    /// store clamps it to [10, 60000]. With `lww-cache`, how long a cached value is served
    /// before it is read again.
    #[arg(long, env = "LATTICEKV_FAAS_REFRESH_MS", default_value_t = 100)]
    pub(crate) refresh_ms: u64,
}

impl DataPlaneArgs {
    /// The data plane over `store` for a host with `executors` executors (runs on the
    /// current runtime), with the causal cache if it is one (for its metrics).
    pub(crate) fn build_with_cache(
        &self,
        store: client::Client,
        executors: u32,
    ) -> (
        Arc<dyn faas::data::DataPlane>,
        Option<Arc<faas::hydro::CausalCache>>,
    ) {
        match self.data_plane {
            DataPlaneKind::Direct => (Arc::new(faas::data::DirectStore::new(store)), None),
            DataPlaneKind::LwwCache => {
                let config = faas::lwwcache::LwwCacheConfig {
                    capacity: self.cache_mb.max(1).saturating_mul(1 << 20),
                    refresh: std::time::Duration::from_millis(self.refresh_ms.max(1)),
                };
                (Arc::new(faas::lwwcache::LwwCache::new(store, config)), None)
            }
            DataPlaneKind::Cache => {
                let config = faas::hydro::CacheConfig {
                    capacity: self.cache_mb.max(1).saturating_mul(1 << 20),
                    slots: executors.max(1),
                    refresh_period: std::time::Duration::from_millis(self.refresh_ms),
                    ..Default::default()
                };
                let cache = faas::hydro::CausalCache::start(store, config);
                (cache.clone(), Some(cache))
            }
        }
    }
}

/// Runs `latticekv faas …` in the foreground (the caller has set up logging).
pub fn run(args: FaasArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let (stop, shutdown) = watch::channel(false);
        tokio::spawn(async move {
            crate::signals::stop_signals(0).await;
            let _ = stop.send(true);
        });
        match args.command {
            FaasCommand::Scheduler(a) => {
                faas::check_loopback(&a.listen).map_err(|e| anyhow!("--listen {e}"))?;
                let store = client::Client::connect(&a.store)
                    .await
                    .with_context(|| format!("connecting to the store at {}", a.store))?;
                let config = faas::scheduler::SchedulerConfig {
                    default_timeout: std::time::Duration::from_secs(a.call_timeout.max(1)),
                    dep_gc_period: dep_gc(a.dep_gc_ms),
                    ..Default::default()
                };
                let scheduler = faas::scheduler::Scheduler::bind(a.listen, store, config)
                    .await
                    .with_context(|| format!("listening on {}", a.listen))?;
                say!("faas    {}", scheduler.local_addr()?);
                if let Some(addr) = a.http {
                    let stats = scheduler.stats_handle();
                    let render: crate::faas_http::Render =
                        Arc::new(move || faas::metrics::render(Some(&stats.stats()), None));
                    let bound = crate::faas_http::start(addr, render, shutdown.clone())
                        .await
                        .with_context(|| format!("--http {addr}"))?;
                    say!("http    {bound} (metrics: /metrics)");
                }
                say!("press Ctrl-C to stop");
                scheduler.serve(shutdown).await?;
            }
            FaasCommand::Host(a) => {
                let store = client::Client::connect(&a.store)
                    .await
                    .with_context(|| format!("connecting to the store at {}", a.store))?;
                let mut config = faas::host::HostConfig::new(a.scheduler);
                config.executors = a.executors.max(1);
                config.python = a.python;
                if let Some(id) = a.id {
                    config.host_id = id;
                }
                say!(
                    "faas host {} of {} with {} executor(s), data plane {:?}",
                    config.host_id,
                    config.scheduler,
                    config.executors,
                    a.data.data_plane
                );
                let (data, cache) = a.data.build_with_cache(store, config.executors);
                if let Some(addr) = a.http {
                    let host = config.host_id.clone();
                    let render: crate::faas_http::Render = Arc::new(move || {
                        let stats = cache.as_ref().map(|c| c.stats());
                        faas::metrics::render(None, stats.as_ref().map(|s| (host.as_str(), s)))
                    });
                    let bound = crate::faas_http::start(addr, render, shutdown.clone())
                        .await
                        .with_context(|| format!("--http {addr}"))?;
                    say!("http    {bound} (metrics: /metrics)");
                }
                say!("press Ctrl-C to stop");
                faas::host::run(config, data, shutdown).await?;
            }
        }
        Ok(())
    })
}

/// The faas settings of `latticekv local`.
#[derive(Args, Debug, Clone)]
pub struct LocalFaasArgs {
    /// Run the serverless layer beside the node: a scheduler and one compute host with
    /// Python executors (docs/serverless.md). Needs python3 with the `latticekv` package.
    #[arg(long, env = "LATTICEKV_FAAS")]
    pub(crate) faas: bool,
    /// Where the scheduler listens (loopback only).
    #[arg(long, env = "LATTICEKV_FAAS_LISTEN", default_value = "127.0.0.1:0")]
    pub(crate) faas_listen: SocketAddr,
    /// Python executor processes of the compute host.
    #[arg(long, env = "LATTICEKV_FAAS_EXECUTORS", default_value_t = 3)]
    pub(crate) faas_executors: u32,
    /// The Python interpreter of the executors (it must have the `latticekv` package).
    #[arg(long, env = "LATTICEKV_FAAS_PYTHON", default_value = "python3")]
    pub(crate) faas_python: String,
    /// The compute host's data plane: `cache` (HydroCache), `direct` (no cache) or
    /// `lww-cache` (a cache without causal consistency, the paper's LWW baseline).
    #[arg(
        long,
        env = "LATTICEKV_FAAS_DATA_PLANE",
        value_enum,
        default_value = "cache"
    )]
    pub(crate) faas_data_plane: DataPlaneKind,
    /// The causal cache's capacity, in MiB.
    #[arg(long, env = "LATTICEKV_FAAS_CACHE_MB", default_value_t = 256)]
    pub(crate) faas_cache_mb: usize,
    /// The period of the cache's store subscriptions (its refresh), in milliseconds.
    #[arg(long, env = "LATTICEKV_FAAS_REFRESH_MS", default_value_t = 100)]
    pub(crate) faas_refresh_ms: u64,
    /// Dependency-metadata GC: a round over the scheduler's caching hosts every this many
    /// milliseconds (0: off). Rounds pause while another scheduler runs on the store
    /// (docs/serverless.md).
    #[arg(long, env = "LATTICEKV_FAAS_DEP_GC_MS", default_value_t = DEFAULT_DEP_GC_MS)]
    pub(crate) faas_dep_gc_ms: u64,
}

/// `--dep-gc-ms`'s default, [`faas::scheduler::DEFAULT_DEP_GC_PERIOD`] in ms.
const DEFAULT_DEP_GC_MS: u64 = faas::scheduler::DEFAULT_DEP_GC_PERIOD.as_millis() as u64;

/// The GC period of a `--dep-gc-ms` value (0: off).
fn dep_gc(ms: u64) -> Option<std::time::Duration> {
    (ms > 0).then(|| std::time::Duration::from_millis(ms))
}

impl LocalFaasArgs {
    fn data(&self) -> DataPlaneArgs {
        DataPlaneArgs {
            data_plane: self.faas_data_plane,
            cache_mb: self.faas_cache_mb,
            refresh_ms: self.faas_refresh_ms,
        }
    }
}

/// A scheduler and a compute host running on a thread of their own.
pub struct Embedded {
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The scheduler's counters and the host's cache, for the node's `/metrics`.
    metrics: EmbeddedMetrics,
}

/// What the embedded scheduler and host export.
#[derive(Clone)]
struct EmbeddedMetrics {
    scheduler: faas::scheduler::StatsHandle,
    cache: Option<Arc<faas::hydro::CausalCache>>,
}

/// What the faas thread hands back once started.
type Started = (SocketAddr, EmbeddedMetrics);

impl Embedded {
    /// Starts them for the node at `store` and prints the scheduler's address.
    pub fn start(args: &LocalFaasArgs, store: String) -> Result<Embedded> {
        faas::check_loopback(&args.faas_listen).map_err(|e| anyhow!("--faas-listen {e}"))?;
        let (stop, shutdown) = watch::channel(false);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<Started, String>>();
        let args = args.clone();
        // One thread lives as long as the executors: they get SIGTERM when it ends
        // (PR_SET_PDEATHSIG is tied to the thread that started them).
        let thread = std::thread::Builder::new()
            .name("lkv-faas".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                rt.block_on(async move {
                    let started = async {
                        let store = client::Client::connect(&store)
                            .await
                            .map_err(|e| format!("connecting to the store: {e}"))?;
                        let scheduler = faas::scheduler::Scheduler::bind(
                            args.faas_listen,
                            store.clone(),
                            faas::scheduler::SchedulerConfig {
                                dep_gc_period: dep_gc(args.faas_dep_gc_ms),
                                ..Default::default()
                            },
                        )
                        .await
                        .map_err(|e| format!("listening on {}: {e}", args.faas_listen))?;
                        let addr = scheduler.local_addr().map_err(|e| e.to_string())?;
                        Ok::<_, String>((scheduler, store, addr))
                    };
                    let (scheduler, store, addr) = match started.await {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let mut config = faas::host::HostConfig::new(addr.to_string());
                    config.executors = args.faas_executors.max(1);
                    config.python = args.faas_python.clone();
                    config.host_id = "local".into();
                    let (data, cache) = args.data().build_with_cache(store, config.executors);
                    let metrics = EmbeddedMetrics {
                        scheduler: scheduler.stats_handle(),
                        cache,
                    };
                    let host = tokio::spawn(faas::host::run(config, data, shutdown.clone()));
                    let _ = ready_tx.send(Ok((addr, metrics)));
                    if let Err(e) = scheduler.serve(shutdown).await {
                        tracing::error!("faas scheduler: {e}");
                    }
                    let _ = host.await;
                });
            })?;
        let (addr, metrics) = ready_rx
            .recv()
            .map_err(|_| anyhow!("the faas thread ended before starting"))?
            .map_err(|e| anyhow!("starting the faas layer: {e}"))?;
        say!("faas    {addr}");
        Ok(Embedded {
            stop,
            thread: Some(thread),
            metrics,
        })
    }

    /// The Prometheus text of the scheduler and the host's cache (`latticekv_faas_*`), for
    /// the node's `/metrics`.
    pub fn metrics_source(&self) -> node::driver::shared::MetricsSource {
        let m = self.metrics.clone();
        Arc::new(move || {
            let cache = m.cache.as_ref().map(|c| c.stats());
            faas::metrics::render(
                Some(&m.scheduler.stats()),
                cache.as_ref().map(|c| ("local", c)),
            )
        })
    }

    /// Stops the scheduler (which unpublishes its address), the host and its executors.
    pub fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
