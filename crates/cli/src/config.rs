//! Running nodes: `latticekv local`, `server` and `routing` — configuration layering,
//! the foreground process, signals. The local cluster supervisor (`local --nodes N`) is in
//! `local_cluster`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use node::routing::RoutingNode;
use node::{Node, NodeConfig};

/// Flags shared by every command that runs a node. Each also reads a `LATTICEKV_*`
/// environment variable.
#[derive(Args, Debug, Clone, Default)]
pub struct NodeArgs {
    /// TOML configuration file (keys as in docs/configuration.md).
    #[arg(long, env = "LATTICEKV_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Native-protocol front address.
    #[arg(long, env = "LATTICEKV_LISTEN")]
    pub(crate) listen: Option<SocketAddr>,
    /// RESP (Redis protocol) address.
    #[arg(long, env = "LATTICEKV_RESP")]
    pub(crate) resp: Option<SocketAddr>,
    /// First per-worker native address (worker i listens on port + i).
    #[arg(long, env = "LATTICEKV_WORKER_LISTEN")]
    pub(crate) worker_listen: Option<SocketAddr>,
    /// Peer-plane address: where other nodes connect (replication, membership). Default:
    /// the --listen host, port + 10000.
    #[arg(long, env = "LATTICEKV_PEER_LISTEN")]
    pub(crate) peer_listen: Option<SocketAddr>,
    /// Host (IP address or DNS name, no port) peers and clients reach this node at; every
    /// published address is this host with the bound port. Needed when listening on
    /// 0.0.0.0 (e.g. in a container).
    #[arg(long, env = "LATTICEKV_ADVERTISE")]
    pub(crate) advertise: Option<String>,
    /// HTTP address: the status page (`/`), `/metrics` (Prometheus) and `/health`. Default:
    /// none for `server`; for `local`, the --listen host at port + 80 (7700 → 7780;
    /// ephemeral with port 0).
    #[arg(long, env = "LATTICEKV_HTTP")]
    pub(crate) http: Option<SocketAddr>,
    /// Shared secret of the cluster: every peer connection proves it, so a node without it
    /// cannot join, gossip or exchange data (prefer the environment variable: flags show
    /// in `ps`).
    #[arg(long, env = "LATTICEKV_CLUSTER_SECRET", hide_env_values = true)]
    pub(crate) cluster_secret: Option<String>,
    /// Directory for node state.
    #[arg(long, env = "LATTICEKV_DATA_DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Worker threads (0 = one per core).
    #[arg(long, env = "LATTICEKV_WORKERS")]
    pub(crate) workers: Option<usize>,
    /// Gossip period between replicas, in milliseconds.
    #[arg(long, env = "LATTICEKV_GOSSIP_PERIOD_MS")]
    pub(crate) gossip_period_ms: Option<u64>,
    /// Workers of a node holding each key by default.
    #[arg(long, env = "LATTICEKV_DEFAULT_LOCAL_REPLICATION")]
    pub(crate) default_local_replication: Option<u32>,
    /// Nodes holding each key by default (the cluster's replication factor).
    #[arg(long, env = "LATTICEKV_REPLICATION")]
    pub(crate) replication: Option<u32>,
    /// Disk-tier nodes holding each key by default (0 = none; no effect without disk nodes).
    #[arg(long, env = "LATTICEKV_DISK_REPLICATION")]
    pub(crate) disk_replication: Option<u32>,
    /// When writes that ask for no level are acknowledged: `merged` (after the merge at the
    /// replica that ran them) or `durable` (once on disk there; needs --data-dir).
    #[arg(long, env = "LATTICEKV_ACK", value_parser = ["merged", "durable"])]
    pub(crate) ack: Option<String>,
    /// Replicas that must hold a write before it is acknowledged, for writes that ask for
    /// fewer (all RESP writes).
    #[arg(long, env = "LATTICEKV_ACK_REPLICAS")]
    pub(crate) ack_replicas: Option<u32>,
    /// Write-ahead log fsync policy for writes acknowledged below the durable level (durable
    /// ones are always fsynced before their answer): `periodic` (100 ms, the default) /
    /// `periodic:250ms`, `always` (an fsync per batch), or `never` (the OS decides).
    #[arg(long, env = "LATTICEKV_FSYNC")]
    pub(crate) fsync: Option<String>,
    /// Memory budget in bytes (0 = half of RAM).
    #[arg(long, env = "LATTICEKV_MEMORY_BUDGET")]
    pub(crate) memory_budget: Option<u64>,
    /// When a memory node copies live values to the disk tier: `every-write`
    /// (write-through; the default of `server`) or `on-eviction` (spill: the write-ahead
    /// log is the one durable copy; the default of `local`). See docs/durability.md.
    #[arg(long, env = "LATTICEKV_DISK_COPY", value_parser = ["every-write", "on-eviction"])]
    pub(crate) disk_copy: Option<String>,
    /// Pin worker i to CPU i.
    #[arg(long, env = "LATTICEKV_PIN_WORKERS")]
    pub(crate) pin_workers: Option<bool>,
    /// Place keys with a Redis hash tag (`{…}`) by the tag, once every storage node of the
    /// cluster does (`false`: by the whole key, as before hash tags).
    #[arg(long, env = "LATTICEKV_HASH_TAGS")]
    pub(crate) hash_tags: Option<bool>,
    /// Node name (unique in the cluster).
    #[arg(long, env = "LATTICEKV_NODE_ID")]
    pub(crate) node_id: Option<String>,
    /// Front addresses of cluster members to join through, comma-separated.
    #[arg(long, env = "LATTICEKV_SEEDS", value_delimiter = ',')]
    pub(crate) seeds: Vec<String>,
    /// Silence after which a member is declared dead and its keys re-replicated (ms).
    #[arg(long, env = "LATTICEKV_FAILURE_TIMEOUT_MS")]
    pub(crate) failure_timeout_ms: Option<u64>,
    /// Period of anti-entropy rounds (ms).
    #[arg(long, env = "LATTICEKV_ANTI_ENTROPY_MS")]
    pub(crate) anti_entropy_ms: Option<u64>,
    /// Period of cluster-metadata gossip and heartbeats (ms).
    #[arg(long, env = "LATTICEKV_CLUSTER_GOSSIP_MS")]
    pub(crate) cluster_gossip_ms: Option<u64>,
    /// Testing only: milliseconds added to the clock behind this node's write timestamps
    /// (simulates a skewed clock; may be negative).
    #[arg(long, env = "LATTICEKV_CLOCK_SKEW_MS", allow_negative_numbers = true)]
    pub(crate) clock_skew_ms: Option<i64>,
    /// Require clients to authenticate with this password (the user `default`, every
    /// permission; more users go in the config file's `[[users]]`). Prefer the environment
    /// variable: command lines are visible to other users of the machine.
    #[arg(long, env = "LATTICEKV_PASSWORD", hide_env_values = true)]
    pub(crate) password: Option<String>,
    /// Serve clients without authentication even on addresses other hosts can reach
    /// (refused by default without --password or users).
    #[arg(
        long,
        env = "LATTICEKV_INSECURE_NO_AUTH",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub(crate) insecure_no_auth: bool,
    /// TLS certificate chain (PEM) of this node: with --tls-key, every port is TLS-only;
    /// the files are reloaded when they change and on SIGHUP.
    #[arg(long, env = "LATTICEKV_TLS_CERT")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert.
    #[arg(long, env = "LATTICEKV_TLS_KEY")]
    pub(crate) tls_key: Option<PathBuf>,
    /// CA certificates (PEM) that signed the cluster's node certificates: peers must
    /// present one it signed (mutual TLS) and are trusted only by it.
    #[arg(long, env = "LATTICEKV_TLS_CA")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// How often each worker closes a statistics period and publishes its window (ms).
    #[arg(long, env = "LATTICEKV_STATS_PERIOD_MS")]
    pub(crate) stats_period_ms: Option<u64>,
    /// Length of the sliding window worker statistics cover (ms; a multiple of the
    /// period).
    #[arg(long, env = "LATTICEKV_STATS_WINDOW_MS")]
    pub(crate) stats_window_ms: Option<u64>,
    /// A backing store the node sits in front of, the system of record:
    /// postgresql://user@host:port/db (table `latticekv_kv`, created if missing).
    #[arg(long, env = "LATTICEKV_BACKING_STORE")]
    pub(crate) backing_store: Option<String>,
    /// Write policy of keys matching no `[[backing.prefixes]]`: write-through (default
    /// with --backing-store), write-back or write-around.
    #[arg(long, env = "LATTICEKV_WRITE_POLICY")]
    pub(crate) write_policy: Option<String>,
    /// What writes and reads do while the backing store recovers: tar, dis, tard or
    /// tardis (default).
    #[arg(long, env = "LATTICEKV_RECOVERY_TECHNIQUE")]
    pub(crate) recovery_technique: Option<String>,
    /// Batches each worker applies at once while the backing store recovers (0: only
    /// foreground requests drain what was buffered). Default 4.
    #[arg(long, env = "LATTICEKV_RECOVERY_WORKERS")]
    pub(crate) recovery_workers: Option<usize>,
}

/// `latticekv local`: the embedded default.
#[derive(Args, Debug)]
pub struct LocalArgs {
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    /// Run a local cluster of N storage processes (on 127.0.0.1, 127.0.0.2, …) and a routing
    /// node, instead of one in-process node.
    #[arg(long, default_value_t = 1)]
    pub(crate) nodes: usize,
    /// Disk-tier nodes to run beside the memory tier (keys in an embedded LSM under the data
    /// directory, default ./latticekv-data). 0: the memory tier only.
    #[arg(long, default_value_t = 1)]
    pub(crate) disk_nodes: usize,
    /// Run the elasticity monitor beside the node (default): it replicates hot keys across
    /// the workers and reports what it did in `latticekv status` (docs/elasticity.md).
    /// `--monitor false` turns it off.
    #[arg(
        long,
        env = "LATTICEKV_MONITOR",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        default_value_t = true,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub(crate) monitor: bool,
    /// The embedded monitor's policy parameters (TOML; docs/elasticity.md).
    #[arg(long, env = "LATTICEKV_MONITOR_CONFIG")]
    pub(crate) monitor_config: Option<PathBuf>,
    /// No HTTP port (status page, metrics, health), which `local` otherwise opens on
    /// loopback.
    #[arg(long)]
    pub(crate) no_http: bool,
    #[command(flatten)]
    pub(crate) faas: crate::faas_cmd::LocalFaasArgs,
}

/// Starts the elasticity monitor of `latticekv local` on a thread of its own, polling
/// `node` (and the nodes it knows). It stops with the process. A node with users or TLS
/// needs credentials the embedded monitor does not have: it is not started then (run
/// `latticekv monitor` with them).
fn embedded_monitor(
    config: &NodeConfig,
    node: &Node,
    policy: monitor::PolicyConfig,
) -> Option<std::thread::JoinHandle<()>> {
    if !config.users.is_empty() || config.tls.cert.is_some() {
        say!("monitor off (the node has users or TLS: run `latticekv monitor` with credentials)");
        return None;
    }
    let addr = node.addresses().front.to_string();
    let spawned = std::thread::Builder::new()
        .name("lkv-monitor".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(crate::monitoring::embedded(addr, policy));
        });
    spawned.ok()
}

/// With `--faas`: a scheduler and a compute host beside `node` (its published front
/// address is the store they use).
fn embedded_faas(args: &LocalArgs, node: &Node) -> Result<Option<crate::faas_cmd::Embedded>> {
    if !args.faas.faas {
        return Ok(None);
    }
    let store = node.published().front.clone();
    let faas = crate::faas_cmd::Embedded::start(&args.faas, store)?;
    node.add_metrics_source(faas.metrics_source());
    Ok(Some(faas))
}

/// Where `latticekv local` keeps its state when no data directory is configured.
pub const DEFAULT_LOCAL_DATA_DIR: &str = "latticekv-data";

/// The port `by` above `addr`'s, or 0 (ephemeral) if `addr` uses port 0.
fn shifted(addr: SocketAddr, by: u16) -> SocketAddr {
    let port = if addr.port() == 0 {
        0
    } else {
        addr.port().saturating_add(by)
    };
    SocketAddr::new(addr.ip(), port)
}

/// The configuration of disk node `i` of a local deployment whose memory node has `config`
/// and answers at `seed`: ports 100 × (i + 1) above the memory node's, data under
/// `data/disk<i>`.
fn local_disk_config(
    config: &NodeConfig,
    i: usize,
    seed: String,
    data: &std::path::Path,
) -> NodeConfig {
    let by = 100 * (i as u16 + 1);
    let mut c = config.clone();
    c.node_id = format!("{}-disk{}", config.node_id, i + 1);
    c.tier = node::NodeTier::Disk;
    c.listen = shifted(config.listen, by);
    c.peer_listen = config.peer_listen.map(|p| shifted(p, by));
    c.resp = shifted(config.resp, by);
    c.http = config.http.map(|h| shifted(h, by));
    c.worker_listen = config.worker_listen.map(|w| shifted(w, by));
    c.data_dir = Some(data.join(format!("disk{}", i + 1)));
    c.cluster.seeds = vec![seed];
    c
}

/// The HTTP port `local` opens by default: the front host, port + 80 (ephemeral if the
/// front port is).
fn default_http(listen: SocketAddr) -> SocketAddr {
    let port = match listen.port() {
        0 => 0,
        p => p.checked_add(80).unwrap_or(0),
    };
    SocketAddr::new(listen.ip(), port)
}

/// `latticekv server`: one storage node of a cluster.
#[derive(Args, Debug)]
pub struct ServerArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Storage tier of this node: `memory` (keys in RAM) or `disk` (keys in an embedded LSM
    /// under --data-dir, RAM as a cache). Default: the config file's `tier`, else memory.
    #[arg(long, env = "LATTICEKV_TIER", value_parser = ["memory", "disk"])]
    tier: Option<String>,
    /// On SIGTERM/SIGINT, stop without handing keys to the other nodes first.
    #[arg(long)]
    no_leave: bool,
}

/// `latticekv routing`: a routing node.
#[derive(Args, Debug)]
pub struct RoutingArgs {
    #[command(flatten)]
    node: NodeArgs,
}

/// Builds the node configuration: defaults < file < environment < flags.
pub fn node_config(args: &NodeArgs) -> Result<NodeConfig> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            toml::from_str::<NodeConfig>(&text)
                .with_context(|| format!("parsing {}", path.display()))?
        }
        None => NodeConfig::default(),
    };
    if let Some(v) = args.listen {
        config.listen = v;
    }
    if let Some(v) = args.resp {
        config.resp = v;
    }
    if let Some(v) = args.worker_listen {
        config.worker_listen = Some(v);
    }
    if let Some(v) = args.peer_listen {
        config.peer_listen = Some(v);
    }
    if let Some(v) = &args.advertise {
        config.advertise = Some(v.clone());
    }
    if let Some(v) = args.http {
        config.http = Some(v);
    }
    if let Some(v) = &args.cluster_secret {
        config.cluster_secret = Some(v.clone());
    }
    if let Some(v) = &args.data_dir {
        config.data_dir = Some(v.clone());
    }
    if let Some(v) = args.workers {
        config.workers = v;
    }
    if let Some(v) = args.gossip_period_ms {
        config.gossip_period_ms = v;
    }
    if let Some(v) = args.default_local_replication {
        config.default_local_replication = v;
    }
    if let Some(v) = &args.ack {
        config.ack = v
            .parse()
            .map_err(|e: String| anyhow::anyhow!("--ack: {e}"))?;
    }
    if let Some(v) = args.ack_replicas {
        config.ack_replicas = v;
    }
    if let Some(v) = args.clock_skew_ms {
        config.clock_skew_ms = v;
    }
    if let Some(v) = &args.fsync {
        config.wal.fsync = v.parse().map_err(|e| anyhow::anyhow!("--fsync {v}: {e}"))?;
    }
    if let Some(v) = args.disk_replication {
        config.cluster.default_disk_replication = v;
    }
    if let Some(v) = args.replication {
        config.cluster.default_global_replication = v;
    }
    if let Some(v) = args.memory_budget {
        config.limits.memory_budget = v;
    }
    if let Some(v) = &args.disk_copy {
        config.disk_copy = Some(
            v.parse()
                .map_err(|e: String| anyhow::anyhow!("--disk-copy: {e}"))?,
        );
    }
    if let Some(v) = args.pin_workers {
        config.pin_workers = v;
    }
    if let Some(v) = args.hash_tags {
        config.hash_tags = v;
    }
    if let Some(v) = &args.node_id {
        config.node_id = v.clone();
    }
    if !args.seeds.is_empty() {
        config.cluster.seeds = args.seeds.clone();
    }
    if let Some(v) = args.failure_timeout_ms {
        config.cluster.failure_timeout_ms = v;
        config.cluster.suspect_after_ms = config.cluster.suspect_after_ms.min(v);
    }
    if let Some(v) = args.anti_entropy_ms {
        config.cluster.anti_entropy_ms = v;
    }
    if let Some(v) = args.cluster_gossip_ms {
        config.cluster.gossip_interval_ms = v;
    }
    if let Some(p) = &args.password {
        if p.is_empty() {
            bail!("--password: empty (unset LATTICEKV_PASSWORD for a node without one)");
        }
        // The quick form replaces a `default` user of the file.
        config.users.retain(|u| u.name != node::auth::DEFAULT_USER);
        config
            .users
            .push(node::auth::UserConfig::default_with_password(p));
    }
    if args.insecure_no_auth {
        config.insecure_no_auth = true;
    }
    if let Some(v) = &args.tls_cert {
        config.tls.cert = Some(v.clone());
    }
    if let Some(v) = &args.tls_key {
        config.tls.key = Some(v.clone());
    }
    if let Some(v) = &args.tls_ca {
        config.tls.ca = Some(v.clone());
    }
    if let Some(v) = args.stats_period_ms {
        config.stats.period_ms = v;
    }
    if let Some(v) = args.stats_window_ms {
        config.stats.window_ms = v;
    }
    if let Some(v) = &args.backing_store {
        config.backing.url = Some(v.clone());
    }
    if let Some(v) = &args.write_policy {
        config.backing.policy = Some(
            v.parse()
                .map_err(|e| anyhow::anyhow!("--write-policy: {e}"))?,
        );
    }
    if let Some(v) = &args.recovery_technique {
        config.backing.technique = v
            .parse()
            .map_err(|e| anyhow::anyhow!("--recovery-technique: {e}"))?;
    }
    if let Some(v) = args.recovery_workers {
        config.backing.recovery_workers = v;
    }
    config.check_exposure()?;
    Ok(config)
}

/// Starts logging to stderr: [`crate::logging::init`].
pub(crate) fn init_logging() {
    crate::logging::init();
}

/// Prints a running node's addresses in the format the tests and scripts parse: the
/// published ones (what clients connect to), and where it listens if that differs.
fn print_node(config: &NodeConfig, node: &Node) {
    let a = node.published();
    let workers = &a.workers;
    // The same, as one event for log collectors (--log-format json).
    tracing::info!(
        node = %config.node_id,
        native = %a.front,
        resp = %a.resp,
        peer = %a.peer,
        workers = a.workers.len(),
        "node started"
    );
    say!(
        "latticekv {} running: node \"{}\", {} worker(s)",
        env!("CARGO_PKG_VERSION"),
        config.node_id,
        a.workers.len()
    );
    say!("native  {}", a.front);
    say!("resp    {}", a.resp);
    say!("workers {}", workers.join(" "));
    say!("peer    {}", a.peer);
    let bound = node.addresses();
    if let Some(http) = bound.http {
        say!("http    {http} (status page: /, metrics: /metrics)");
    }
    if bound.front.to_string() != a.front {
        say!("listen  {} (resp {})", bound.front, bound.resp);
    }
}

/// What ended the foreground wait.
pub(crate) enum Ending {
    Signal,
    NodeStopped,
}

/// Waits for SIGINT, SIGTERM or `node` stopping; on SIGHUP, runs `reload` (TLS
/// certificates) and goes on waiting. A SIGINT or SIGTERM that came before (while the node
/// started: the handlers are installed first, [`crate::signals`]) ends the wait at once.
pub(crate) fn wait(node: Option<&Node>, reload: &dyn Fn()) -> Result<Ending> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut stops = crate::signals::stops()?;
        let mut hangups = crate::signals::hangups()?;
        // SIGTERM has been handled since the process started: scripts may wait for this
        // line, but need not.
        say!("press Ctrl-C to stop");
        let _ = std::io::stdout().flush();
        let mut stopped = node.map(Node::stopped);
        let node_stopped = async {
            match stopped.as_mut() {
                Some(rx) => {
                    let _ = rx.wait_for(|s| *s).await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::pin!(node_stopped);
        loop {
            tokio::select! {
                _ = stops.wait_for(|n| *n > 0) => return Ok(Ending::Signal),
                _ = &mut node_stopped => return Ok(Ending::NodeStopped),
                Ok(()) = hangups.changed() => reload(),
            }
        }
    })
}

/// Reloads `node`'s TLS certificate (on SIGHUP), logging the outcome.
fn reload_tls(node: &Node) {
    match node.reload_tls() {
        Ok(()) => tracing::info!("TLS certificate reloaded (SIGHUP)"),
        Err(e) => {
            tracing::warn!(error = %e, "TLS certificate not reloaded; keeping the current one")
        }
    }
}

/// Runs one node in the foreground until a signal (or a `Leave` request) stops it.
fn run_node(config: NodeConfig, leave_on_signal: bool) -> Result<()> {
    let node = Node::start_reporting(config.clone(), &crate::replay_bar::ReplayBar::default())
        .context("starting the node")?;
    serve_node(config, node, leave_on_signal)
}

/// Runs a started node until it stops or a signal comes.
fn serve_node(config: NodeConfig, node: Node, leave_on_signal: bool) -> Result<()> {
    print_node(&config, &node);
    match wait(Some(&node), &|| reload_tls(&node))? {
        Ending::NodeStopped => {
            node.join().context("stopping the node")?;
        }
        Ending::Signal if leave_on_signal && node.has_peers() => {
            crate::logging::note(
                "leaving the cluster (handing every key to its new replicas); a second \
                 signal stops at once, losing keys not yet handed off",
            );
            node.leave_and_stop(second_signal()?)
                .context("leaving the cluster")?;
        }
        Ending::Signal => {
            crate::logging::note("stopping…");
            node.stop().context("stopping the node")?;
        }
    }
    crate::logging::note("stopped");
    Ok(())
}

/// A receiver that becomes true on the second SIGINT or SIGTERM (the first started the
/// leave), watched on a thread of its own while the node leaves.
fn second_signal() -> Result<tokio::sync::watch::Receiver<bool>> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    std::thread::Builder::new()
        .name("lkv-second-signal".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(crate::signals::stop_signals(1));
            let _ = tx.send(true);
        })?;
    Ok(rx)
}

/// `latticekv local` with one storage node (in this process, with its disk nodes).
pub fn run_local(args: LocalArgs) -> Result<()> {
    init_logging();
    let mut config = node_config(&args.node)?;
    if args.no_http {
        config.http = None;
    } else if config.http.is_none() {
        config.http = Some(default_http(config.listen));
    }
    let policy = crate::monitoring::load_policy(args.monitor_config.as_deref())?;
    if args.faas.faas && (!config.users.is_empty() || config.tls.cert.is_some()) {
        bail!("--faas: the serverless layer cannot use a node with users or TLS yet");
    }
    if args.disk_nodes == 0 {
        let node = Node::start_reporting(config.clone(), &crate::replay_bar::ReplayBar::default())
            .context("starting the node")?;
        let _monitor = args
            .monitor
            .then(|| embedded_monitor(&config, &node, policy));
        let faas = embedded_faas(&args, &node)?;
        let served = serve_node(config, node, false);
        if let Some(f) = faas {
            f.stop();
        }
        return served;
    }
    if args.disk_nodes > 16 {
        bail!(
            "--disk-nodes {}: at most 16 in one process",
            args.disk_nodes
        );
    }
    // A memory node and disk nodes in this process, one cluster. They share the machine,
    // so a copy of every write on the disk nodes would add no fault tolerance over the
    // memory node's log: by default they hold what does not fit in RAM (docs/durability.md).
    config.disk_copy.get_or_insert(node::DiskCopy::OnEviction);
    let data = config
        .data_dir
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from(DEFAULT_LOCAL_DATA_DIR));
    config.data_dir = Some(data.join("memory"));
    let memory = Node::start_reporting(config.clone(), &crate::replay_bar::ReplayBar::default())
        .context("starting the memory node")?;
    let seed = memory.addresses().front.to_string();
    let mut disks = Vec::new();
    for i in 0..args.disk_nodes {
        let c = local_disk_config(&config, i, seed.clone(), &data);
        let node = Node::start(c.clone())
            .with_context(|| format!("starting disk node {} in {}", i + 1, data.display()))?;
        disks.push((c, node));
    }
    // Ready means one cluster: wait (briefly) until the memory node sees its disk nodes.
    let ready = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !memory.has_peers()
        && std::time::Instant::now() < ready
        && !crate::signals::stop_requested()
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for (c, node) in &disks {
        say!(
            "disk    {} {} ({})",
            c.node_id,
            node.addresses().front,
            c.data_dir
                .as_ref()
                .map(|d| d.display().to_string())
                .unwrap_or_default()
        );
    }
    let faas = embedded_faas(&args, &memory)?;
    print_node(&config, &memory);
    let _monitor = args
        .monitor
        .then(|| embedded_monitor(&config, &memory, policy));
    let ending = wait(Some(&memory), &|| {
        reload_tls(&memory);
        for (_, node) in &disks {
            reload_tls(node);
        }
    })?;
    if matches!(ending, Ending::Signal) {
        crate::logging::note("stopping…");
    }
    if let Some(f) = faas {
        f.stop();
    }
    for (_, node) in disks {
        node.stop().context("stopping a disk node")?;
    }
    memory.stop().context("stopping the memory node")?;
    crate::logging::note("stopped");
    Ok(())
}

/// `latticekv server`.
pub fn run_server(args: ServerArgs) -> Result<()> {
    init_logging();
    let mut config = node_config(&args.node)?;
    match args.tier.as_deref() {
        Some("disk") => config.tier = node::NodeTier::Disk,
        Some("memory") => config.tier = node::NodeTier::Memory,
        _ => {}
    }
    if args.node.node_id.is_none() && config.node_id == NodeConfig::default().node_id {
        // Unique by default: nodes of a cluster must not share an id (the advertised host,
        // not a wildcard every container binds alike).
        config.node_id = format!("node-{}", default_id_addr(&config));
    }
    run_node(config, !args.no_leave)
}

/// The address a default node id is made from: the front address as published.
fn default_id_addr(config: &NodeConfig) -> String {
    config
        .published(config.listen)
        .unwrap_or_else(|_| config.listen.to_string())
}

/// `latticekv routing`.
pub fn run_routing(args: RoutingArgs) -> Result<()> {
    init_logging();
    let mut config = node_config(&args.node)?;
    if args.node.listen.is_none() {
        config.listen = SocketAddr::from(([127, 0, 0, 1], 7600));
    }
    if args.node.node_id.is_none() {
        config.node_id = format!("routing-{}", default_id_addr(&config));
    }
    let routing = RoutingNode::start(config).context("starting the routing node")?;
    say!("routing {}", routing.published());
    wait(None, &|| match routing.reload_tls() {
        Ok(()) => tracing::info!("TLS certificate reloaded (SIGHUP)"),
        Err(e) => {
            tracing::warn!(error = %e, "TLS certificate not reloaded; keeping the current one")
        }
    })?;
    routing.stop();
    crate::logging::note("stopped");
    Ok(())
}
