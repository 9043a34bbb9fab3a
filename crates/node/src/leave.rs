//! Leaving the cluster gracefully.
//!
//! The node marks itself as left (its agent takes it out of its own rings and tells the
//! others at once); every worker then hands each key to its new replicas, and drops it only
//! once every one of them acknowledged it durably. The leave is complete when every worker
//! has handed everything off ([`CoreStats::handed_everything_off`](crate::core::CoreStats)):
//! however long that takes — a replica that cannot be reached yet is retried — unless the
//! operator forces it, which stops the node once its keys were offered and a short grace
//! passed, losing the keys no replica acknowledged.

use std::time::{Duration, Instant};

use crate::driver::shared::Shared;
use crate::driver::worker::all_stats;
use crate::error::NodeError;

/// How often a leaving node looks at its workers' progress.
const POLL: Duration = Duration::from_millis(50);

/// How often it reports progress in its log.
const REPORT_EVERY: Duration = Duration::from_secs(5);

/// How long a forced leave lets hand-offs go out before stopping.
const FORCE_GRACE: Duration = Duration::from_secs(2);

/// Leaves the cluster (see the module docs). Returns once every key was handed off (or,
/// with `force`, once the grace passed).
pub async fn leave(shared: &Shared, force: bool) -> Result<(), NodeError> {
    let tier = shared.config.tier.tier();
    let alone = shared.snapshots.borrow().view.view.tier_size(tier) <= 1;
    if alone && !force {
        // Nobody could take its keys: a graceful leave would wait forever.
        return Err(NodeError::InvalidArgument(format!(
            "this node is the only {} node of its cluster: no other node can take its keys; \
             stop it instead, or `leave --force` to stop it and drop them",
            shared.config.tier.name()
        )));
    }
    let _ = shared.leaving.send(true);
    shared.agent.leave().await;
    let started = Instant::now();
    let mut reported = Instant::now();
    loop {
        let stats = all_stats(shared).await;
        if stats.is_empty() {
            return Err(NodeError::ShuttingDown);
        }
        if stats.iter().all(|s| s.core.handed_everything_off()) {
            tracing::info!(
                took_ms = started.elapsed().as_millis() as u64,
                "every key handed off"
            );
            return Ok(());
        }
        let owed: u64 = stats
            .iter()
            .map(|s| s.core.shard.stored_keys + s.core.shard.pending_replication)
            .sum();
        if force && started.elapsed() >= FORCE_GRACE {
            tracing::warn!(
                owed,
                "forced leave: stopping with keys not acknowledged by their new replicas"
            );
            return Ok(());
        }
        if reported.elapsed() >= REPORT_EVERY {
            reported = Instant::now();
            tracing::info!(
                owed,
                elapsed_s = started.elapsed().as_secs(),
                "leaving: keys still to hand off"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}
