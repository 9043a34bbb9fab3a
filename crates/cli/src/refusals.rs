//! Flags of `latticekv local` that contradict each other: refused before anything starts,
//! with what to change, rather than one of them silently ignored.

use anyhow::{bail, Result};

use crate::config::LocalArgs;

/// Refuses `args` if two of its settings cannot both hold.
pub(crate) fn check_local(args: &LocalArgs) -> Result<()> {
    if args.nodes == 0 {
        bail!("--nodes 0: a local cluster has at least one node (1, the default, runs it in this process)");
    }
    if let (Some(http), true) = (args.node.http, args.no_http) {
        bail!(
            "--http {http} and --no-http contradict each other: keep one \
             (LATTICEKV_HTTP sets --http too)"
        );
    }
    if let (Some(http), true) = (args.node.http, args.nodes > 1) {
        bail!(
            "--http {http} with --nodes {}: the local cluster opens no HTTP port; for metrics \
             and the status page run its nodes with `latticekv server --http ADDR`",
            args.nodes
        );
    }
    if let (Some(path), false) = (&args.monitor_config, args.monitor) {
        bail!(
            "--monitor-config {} with --monitor false: the monitor it configures would not \
             run; drop one (LATTICEKV_MONITOR_CONFIG sets --monitor-config too)",
            path.display()
        );
    }
    Ok(())
}
