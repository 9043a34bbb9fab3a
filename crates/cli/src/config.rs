//! `latticekv local`: configuration layering and running the node in the foreground.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use node::{Node, NodeConfig};

/// Flags of `latticekv local`. Each also reads a `LATTICEKV_*` environment variable.
#[derive(Args, Debug)]
pub struct LocalArgs {
    /// TOML configuration file (keys as in docs/configuration.md).
    #[arg(long, env = "LATTICEKV_CONFIG")]
    config: Option<PathBuf>,
    /// Native-protocol front address.
    #[arg(long, env = "LATTICEKV_LISTEN")]
    listen: Option<SocketAddr>,
    /// RESP (Redis protocol) address.
    #[arg(long, env = "LATTICEKV_RESP")]
    resp: Option<SocketAddr>,
    /// First per-worker native address (worker i listens on port + i).
    #[arg(long, env = "LATTICEKV_WORKER_LISTEN")]
    worker_listen: Option<SocketAddr>,
    /// Directory for node state.
    #[arg(long, env = "LATTICEKV_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Worker threads (0 = one per core).
    #[arg(long, env = "LATTICEKV_WORKERS")]
    workers: Option<usize>,
    /// Gossip period between replicas, in milliseconds.
    #[arg(long, env = "LATTICEKV_GOSSIP_PERIOD_MS")]
    gossip_period_ms: Option<u64>,
    /// Workers holding each key by default.
    #[arg(long, env = "LATTICEKV_DEFAULT_LOCAL_REPLICATION")]
    default_local_replication: Option<u32>,
    /// Memory budget in bytes (0 = half of RAM).
    #[arg(long, env = "LATTICEKV_MEMORY_BUDGET")]
    memory_budget: Option<u64>,
    /// Pin worker i to CPU i.
    #[arg(long, env = "LATTICEKV_PIN_WORKERS")]
    pin_workers: Option<bool>,
    /// Node name.
    #[arg(long, env = "LATTICEKV_NODE_ID")]
    node_id: Option<String>,
}

/// Builds the node configuration: defaults < file < environment < flags.
pub fn node_config(args: &LocalArgs) -> Result<NodeConfig> {
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
    if let Some(v) = args.memory_budget {
        config.limits.memory_budget = v;
    }
    if let Some(v) = args.pin_workers {
        config.pin_workers = v;
    }
    if let Some(v) = &args.node_id {
        config.node_id = v.clone();
    }
    Ok(config)
}

/// Runs a node until SIGINT or SIGTERM, then stops it cleanly.
pub fn run_local(args: LocalArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LATTICEKV_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = node_config(&args)?;
    let node = Node::start(config.clone()).context("starting the node")?;
    let a = node.addresses();
    let workers: Vec<String> = a.workers.iter().map(|w| w.to_string()).collect();
    println!(
        "latticekv {} running: node \"{}\", {} worker(s)",
        env!("CARGO_PKG_VERSION"),
        config.node_id,
        a.workers.len()
    );
    println!("native  {}", a.front);
    println!("resp    {}", a.resp);
    println!("workers {}", workers.join(" "));
    println!("press Ctrl-C to stop");
    use std::io::Write;
    let _ = std::io::stdout().flush();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(wait_for_signal())?;
    eprintln!("stopping…");
    node.stop().context("stopping the node")?;
    eprintln!("stopped");
    Ok(())
}

async fn wait_for_signal() -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
