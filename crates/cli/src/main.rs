//! `latticekv`: run a node (`local`), talk to one (`get`, `put`, `del`, `status`, …), or load
//! it (`bench`).
//!
//! Configuration of `local` comes from, in increasing precedence: defaults, a TOML file
//! (`--config`), `LATTICEKV_*` environment variables, flags (see `docs/configuration.md`).
//! Client commands find the node at `--addr`, else `LATTICEKV_ADDR`, else `127.0.0.1:7700`.

#[macro_use]
mod output;
mod commands;
mod config;
mod errors;
mod faas_cmd;
mod faas_http;
mod local_cluster;
mod logging;
mod monitoring;
mod refusals;
mod replay_bar;
mod signals;
mod status;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// mimalloc instead of glibc's allocator: the request path allocates and frees small
/// blocks from one thread at a time, where glibc's free-list consolidation showed up as a
/// top entry in profiles (see docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// latticekv: a coordination-free key-value store of lattices.
#[derive(Parser, Debug)]
#[command(name = "latticekv", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines of running nodes: `text`, or `json` (one object per line, for log
    /// collectors). Which events: LATTICEKV_LOG (else RUST_LOG), e.g. `debug,lsm_tree=info`.
    #[arg(
        long,
        global = true,
        env = "LATTICEKV_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: logging::LogFormat,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the embedded default: one node with all its ports, in the foreground (or, with
    /// `--nodes N`, a local cluster of N node processes and a routing node).
    Local(config::LocalArgs),
    /// Run one storage node of a cluster (join it with `--seeds`).
    Server(config::ServerArgs),
    /// Run a routing node: a cluster member without data that answers where keys live.
    Routing(config::RoutingArgs),
    /// Read a key and print its value.
    Get(commands::GetArgs),
    /// Write a value (merged into the key's lattice).
    Put(commands::PutArgs),
    /// Delete keys.
    Del(commands::DelArgs),
    /// Print keys' values, then every new version of them as it arrives (a subscription).
    Watch(commands::WatchArgs),
    /// Set how many workers of the node hold a key (its local replication).
    Replicate(commands::ReplicateArgs),
    /// Show the cluster's members and ring ownership, and each node's workers and keys.
    Status(status::StatusArgs),
    /// Run the elasticity policy: poll every node's statistics, replicate hot keys, add
    /// and remove nodes (`--dry-run`: print what it would do).
    Monitor(monitoring::MonitorArgs),
    /// Ask a node to leave the cluster: it hands its keys to the other nodes, then stops.
    Leave(commands::LeaveArgs),
    /// Remove a member declared dead for good (it will not come back with its data).
    Forget(commands::ForgetArgs),
    /// The serverless layer: `faas scheduler`, `faas host` (docs/serverless.md).
    Faas(faas_cmd::FaasArgs),
    /// Generate load (YCSB-style or redis-benchmark-style) over RESP or the native protocol,
    /// against latticekv or Redis, and report throughput and latency.
    Bench(bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    logging::set_format(cli.log_format);
    if matches!(
        cli.command,
        Command::Local(_) | Command::Server(_) | Command::Routing(_) | Command::Faas(_)
    ) {
        // Before anything starts: a signal during start-up then stops the process cleanly.
        if let Err(e) = signals::install() {
            eprintln!("error: {}", errors::report(&e));
            std::process::exit(2);
        }
    }
    let result: Result<i32> = match cli.command {
        Command::Local(args) => refusals::check_local(&args)
            .and_then(|()| {
                if args.nodes > 1 {
                    local_cluster::run(args)
                } else {
                    config::run_local(args)
                }
            })
            .map(|()| 0),
        Command::Server(args) => config::run_server(args).map(|()| 0),
        Command::Routing(args) => config::run_routing(args).map(|()| 0),
        Command::Faas(args) => {
            logging::init();
            faas_cmd::run(args).map(|()| 0)
        }
        Command::Leave(args) => commands::block_on(commands::leave(args)),
        Command::Forget(args) => commands::block_on(commands::forget(args)),
        Command::Get(args) => commands::block_on(commands::get(args)),
        Command::Put(args) => commands::block_on(commands::put(args)),
        Command::Del(args) => commands::block_on(commands::del(args)),
        Command::Watch(args) => commands::block_on(commands::watch(args)),
        Command::Replicate(args) => commands::block_on(commands::replicate(args)),
        Command::Status(args) => commands::block_on(status::status(args)),
        Command::Monitor(args) => commands::block_on(monitoring::run(args)),
        Command::Bench(args) => commands::block_on(async move {
            bench::run_and_print(args).await?;
            Ok(0)
        }),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {}", errors::report(&e));
            std::process::exit(2);
        }
    }
}
