//! Leaving the cluster gracefully.
//!
//! The node marks itself as left (its agent takes it out of its own rings and tells the
//! others at once); every worker then hands each key to its new replicas, and drops it only
//! once every one of them acknowledged it durably. The keys are handed off when every
//! worker has handed everything off ([`CoreStats::handed_everything_off`]): however long
//! that takes — a replica that cannot be reached yet is retried — unless the operator
//! forces it, which stops the node once its keys were offered and a short grace passed,
//! losing the keys no replica acknowledged.
//!
//! Then the requests the workers had in progress at that moment are finished first
//! ([`LeaveProgress`]): reads other nodes forwarded here under an older view, which this
//! node answers by asking the keys' new replicas, and its own clients' requests waiting for
//! other nodes. A node that stopped with them open left their senders waiting until their
//! timeout. The wait is bounded ([`DRAIN_BOUND_MS`]): every such request waits only for
//! requests to other workers, each failing after the core's peer timeout.

use std::time::{Duration, Instant};

use crate::core::{CoreConfig, CoreStats};
use crate::driver::shared::Shared;
use crate::driver::worker::all_stats;
use crate::error::NodeError;

/// How often a leaving node looks at its workers' progress.
const POLL: Duration = Duration::from_millis(50);

/// How often it reports progress in its log.
const REPORT_EVERY: Duration = Duration::from_secs(5);

/// How long a forced leave lets hand-offs go out before stopping.
const FORCE_GRACE: Duration = Duration::from_secs(2);

/// Longest wait, once every key is handed off, for the requests then in progress: the
/// core's peer timeout (what each of them waits for at most) and a second.
pub const DRAIN_BOUND_MS: u64 = CoreConfig::DEFAULT_PEER_TIMEOUT_MS + 1_000;

/// Where a leave stands ([`LeaveProgress::step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaveState {
    /// Keys (or deletes) are still to be handed to their new replicas.
    HandingOff {
        /// Keys stored and changes queued, over all workers.
        owed: u64,
    },
    /// Every key is handed off; requests that were in progress then are being finished.
    Draining {
        /// Requests in progress on the workers still finishing one of those.
        open: u64,
    },
    /// The node may stop: every key handed off, and the requests in progress when that
    /// happened finished — or the drain's bound passed with some of them open.
    Done {
        /// Requests in progress (0, or abandoned at the bound) on the workers still
        /// finishing one of those.
        open: u64,
    },
}

/// The decision of when a leaving node may stop, from its workers' counters (polled): once
/// every worker has handed everything off, and every request in progress at that moment
/// has finished or the drain's bound passed. Requests arriving meanwhile (a client or
/// another node still routing here) do not hold the node: only those older than the moment
/// the hand-off was seen complete. Pure, so the simulation decides as the node does.
#[derive(Debug)]
pub struct LeaveProgress {
    bound_ms: u64,
    /// Since when (ms of the caller's clock) everything is handed off, and each worker's
    /// last request id then.
    drain: Option<(u64, Vec<u64>)>,
}

impl LeaveProgress {
    /// A leave that waits at most `bound_ms` for the requests in progress once its keys
    /// are handed off ([`DRAIN_BOUND_MS`] for a node).
    pub fn new(bound_ms: u64) -> LeaveProgress {
        LeaveProgress {
            bound_ms,
            drain: None,
        }
    }

    /// Where the leave stands at `now_ms`, given each worker's counters (in worker order).
    pub fn step(&mut self, stats: &[CoreStats], now_ms: u64) -> LeaveState {
        if !stats.iter().all(CoreStats::handed_everything_off) {
            // A key came back (handed here under an older view): hand it off again, and
            // wait for what is in progress then.
            self.drain = None;
            let owed = stats
                .iter()
                .map(|s| s.shard.stored_keys + s.shard.pending_replication)
                .sum();
            return LeaveState::HandingOff { owed };
        }
        let (since, marks) = self
            .drain
            .get_or_insert_with(|| (now_ms, stats.iter().map(|s| s.last_id).collect()));
        // Requests that were in progress when the hand-off was seen complete.
        let open: u64 = stats
            .iter()
            .zip(marks.iter())
            .filter(|(s, mark)| s.oldest_job.is_some_and(|j| j <= **mark))
            .map(|(s, _)| s.jobs)
            .sum();
        if open == 0 || now_ms.saturating_sub(*since) >= self.bound_ms {
            LeaveState::Done { open }
        } else {
            LeaveState::Draining { open }
        }
    }
}

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
    let mut progress = LeaveProgress::new(DRAIN_BOUND_MS);
    loop {
        let stats: Vec<CoreStats> = all_stats(shared).await.iter().map(|s| s.core).collect();
        if stats.is_empty() {
            return Err(NodeError::ShuttingDown);
        }
        let now_ms = started.elapsed().as_millis() as u64;
        let owed = match progress.step(&stats, now_ms) {
            LeaveState::Done { open } => {
                if open > 0 {
                    tracing::warn!(open, "stopping with requests still in progress");
                }
                tracing::info!(took_ms = now_ms, "every key handed off");
                return Ok(());
            }
            LeaveState::Draining { .. } => 0,
            LeaveState::HandingOff { owed } => owed,
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker's counters: `stored` keys, requests `jobs` from `oldest` on, `last` id.
    fn worker(stored: u64, jobs: u64, oldest: Option<u64>, last: u64) -> CoreStats {
        let mut s = CoreStats::default();
        s.shard.stored_keys = stored;
        s.jobs = jobs;
        s.oldest_job = oldest;
        s.last_id = last;
        s
    }

    #[test]
    fn a_leave_finishes_the_requests_open_when_its_keys_are_handed_off() {
        let mut p = LeaveProgress::new(1_000);
        // Keys still here: handing off, whatever the requests.
        let s = [worker(3, 0, None, 10), worker(0, 1, Some(9), 10)];
        assert_eq!(p.step(&s, 0), LeaveState::HandingOff { owed: 3 });
        // Handed off, worker 1 still answering request 9 (a forwarded read): wait.
        let s = [worker(0, 0, None, 12), worker(0, 1, Some(9), 14)];
        assert_eq!(p.step(&s, 10), LeaveState::Draining { open: 1 });
        assert_eq!(p.step(&s, 500), LeaveState::Draining { open: 1 });
        // Request 9 answered; requests that came since (15, on both) do not hold the node.
        let s = [worker(0, 1, Some(15), 15), worker(0, 2, Some(15), 16)];
        assert_eq!(p.step(&s, 600), LeaveState::Done { open: 0 });
    }

    #[test]
    fn the_wait_for_open_requests_is_bounded() {
        let mut p = LeaveProgress::new(1_000);
        let s = [worker(0, 2, Some(4), 8)];
        assert_eq!(p.step(&s, 100), LeaveState::Draining { open: 2 });
        assert_eq!(p.step(&s, 1_099), LeaveState::Draining { open: 2 });
        assert_eq!(p.step(&s, 1_100), LeaveState::Done { open: 2 });
    }

    #[test]
    fn a_key_handed_back_restarts_the_wait() {
        let mut p = LeaveProgress::new(1_000);
        assert_eq!(
            p.step(&[worker(0, 1, Some(4), 5)], 0),
            LeaveState::Draining { open: 1 }
        );
        // A node with an older view handed a key back here: hand it off again.
        assert_eq!(
            p.step(&[worker(1, 1, Some(4), 7)], 900),
            LeaveState::HandingOff { owed: 1 }
        );
        // Handed off again at 950: the bound counts from then, and request 6 (open then)
        // is waited for too.
        let s = [worker(0, 1, Some(6), 9)];
        assert_eq!(p.step(&s, 950), LeaveState::Draining { open: 1 });
        assert_eq!(p.step(&s, 1_900), LeaveState::Draining { open: 1 });
        assert_eq!(
            p.step(&[worker(0, 0, None, 9)], 1_901),
            LeaveState::Done { open: 0 }
        );
    }
}
