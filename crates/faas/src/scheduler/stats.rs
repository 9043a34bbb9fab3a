//! What a scheduler counts for its metrics: calls by protocol and outcome, their
//! durations, aborted attempts and re-placed runs. Kept in the scheduler's state, under the
//! lock every step already takes: counting adds no synchronisation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::pb;

/// Upper bounds (seconds) of the call-duration histogram's buckets; a last, unbounded
/// bucket counts slower calls.
pub const CALL_BUCKETS_S: [f64; 14] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

/// A scheduler's counters since it started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulerStats {
    /// Calls answered, by protocol (`ct`, `opt`, `con`, `hb`: the protocol they ended
    /// with) and outcome (`ok`, or the error code in lower case: `timeout`, `unavailable`,
    /// `function_raised`, …).
    pub calls: BTreeMap<(&'static str, &'static str), u64>,
    /// Calls by duration, from admission to answer: bucket `i` counts those of at most
    /// [`CALL_BUCKETS_S`]`[i]` (and more than the bound before), the last the slower ones.
    pub duration_buckets: [u64; CALL_BUCKETS_S.len() + 1],
    /// The sum of those durations, seconds.
    pub duration_sum_s: f64,
    /// Attempts of spread runs (OPT, CON, HB) aborted by validation and run again.
    pub aborts: u64,
    /// Runs placed again because their host failed.
    pub retries: u64,
    /// Runs in progress (admitted, not answered).
    pub runs: u64,
    /// Runs waiting for a host.
    pub queued: u64,
    /// Connected compute hosts.
    pub hosts: u64,
    /// Dependency-GC rounds completed.
    pub gc_rounds: u64,
    /// Keys with a stable clock after the last round.
    pub gc_stable_keys: u64,
    /// 1 while dependency-GC rounds are paused because another scheduler holds a lease on
    /// the store (or the leases cannot be read), else 0.
    pub gc_paused: u64,
    /// Dependency-GC rounds skipped (not started, or their result not sent) for that
    /// reason.
    pub gc_skipped: u64,
}

impl SchedulerStats {
    /// Counts a call that ended after `took` with `result`, under `protocol`.
    pub(super) fn call(
        &mut self,
        protocol: i32,
        result: &pb::client_response::Result,
        took: Duration,
    ) {
        let outcome = match result {
            pb::client_response::Result::Error(e) => crate::error::code_id(e.code()),
            _ => "ok",
        };
        *self
            .calls
            .entry((protocol_name(protocol), outcome))
            .or_default() += 1;
        let s = took.as_secs_f64();
        let i = CALL_BUCKETS_S
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(CALL_BUCKETS_S.len());
        self.duration_buckets[i] += 1;
        self.duration_sum_s += s;
    }
}

/// A protocol's name in the metrics.
fn protocol_name(p: i32) -> &'static str {
    match pb::Protocol::try_from(p) {
        Ok(pb::Protocol::Opt) => "opt",
        Ok(pb::Protocol::Con) => "con",
        Ok(pb::Protocol::Hb) => "hb",
        _ => "ct",
    }
}

/// Reads a running scheduler's counters (taken before [`Scheduler::serve`] consumes it).
///
/// [`Scheduler::serve`]: super::Scheduler::serve
#[derive(Clone)]
pub struct StatsHandle(pub(super) Arc<super::Shared>);

impl StatsHandle {
    /// The counters now.
    pub fn stats(&self) -> SchedulerStats {
        let st = self.0.lock();
        let mut s = st.stats.clone();
        s.runs = st.runs.len() as u64;
        s.queued = st.queue.len() as u64;
        s.hosts = st.hosts.len() as u64;
        s
    }
}
