//! When to restart a node that died: exponential back-off, reset once a node stayed up.
//!
//! Pure: the caller passes the time. A crash loop therefore costs at most one start per
//! [`RestartPolicy::max_backoff`] once the back-off has grown.

use std::time::{Duration, Instant};

/// Parameters of the restart back-off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Wait before the first restart after a node died. Default: 1 s (a restart inside the
    /// 5 s failure timeout rejoins before the others declare the node dead, so no keys are
    /// re-replicated for nothing).
    pub initial_backoff: Duration,
    /// The longest wait: the back-off doubles per consecutive failure up to this. Default:
    /// 5 min (a crash loop starts the node at most 12 times an hour).
    pub max_backoff: Duration,
    /// A node that ran this long before dying starts again from the initial back-off.
    /// Default: 60 s.
    pub stable_after: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            stable_after: Duration::from_secs(60),
        }
    }
}

/// One node's restart history: consecutive failures and when it last started.
#[derive(Clone, Debug, Default)]
pub struct Backoff {
    /// Failures (deaths or failed starts) since the node last ran for `stable_after`.
    failures: u32,
    /// When the node started, while it runs.
    running_since: Option<Instant>,
    /// Whether it ever started (the next start is then a restart).
    ever_started: bool,
    /// Restarts that succeeded, in total.
    restarts: u32,
}

impl Backoff {
    /// A node that has not started yet.
    pub fn new() -> Backoff {
        Backoff::default()
    }

    /// The node started (for the first time, or again) at `now`.
    pub fn started(&mut self, now: Instant) {
        if self.ever_started {
            self.restarts = self.restarts.saturating_add(1);
        }
        self.ever_started = true;
        self.running_since = Some(now);
    }

    /// The node died, or a start failed, at `now`: how long to wait before the next start.
    pub fn failed(&mut self, now: Instant, policy: &RestartPolicy) -> Duration {
        // A failed start has no run: the failures go on counting.
        if let Some(since) = self.running_since.take() {
            if now.saturating_duration_since(since) >= policy.stable_after {
                self.failures = 0;
            }
        }
        self.failures = self.failures.saturating_add(1);
        let doublings = (self.failures - 1).min(31);
        policy
            .initial_backoff
            .saturating_mul(1u32 << doublings)
            .min(policy.max_backoff)
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Successful restarts so far.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RestartPolicy {
        RestartPolicy {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            stable_after: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_crash_loop_backs_off_exponentially_up_to_the_maximum() {
        let p = policy();
        let t0 = Instant::now();
        let mut b = Backoff::new();
        b.started(t0);
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            now += Duration::from_millis(100);
            let wait = b.failed(now, &p);
            waits.push(wait.as_secs());
            now += wait;
            b.started(now);
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(b.restarts(), 8);
        assert_eq!(b.failures(), 8);
    }

    #[test]
    fn failed_starts_count_as_failures() {
        let p = policy();
        let t0 = Instant::now();
        let mut b = Backoff::new();
        b.started(t0);
        assert_eq!(
            b.failed(t0 + Duration::from_secs(5), &p),
            Duration::from_secs(1)
        );
        // Two starts fail at once: no run in between, so no reset.
        assert_eq!(
            b.failed(t0 + Duration::from_secs(600), &p),
            Duration::from_secs(2)
        );
        assert_eq!(
            b.failed(t0 + Duration::from_secs(700), &p),
            Duration::from_secs(4)
        );
        assert_eq!(b.restarts(), 0);
    }

    #[test]
    fn a_node_that_stayed_up_starts_over_from_the_initial_backoff() {
        let p = policy();
        let t0 = Instant::now();
        let mut b = Backoff::new();
        b.started(t0);
        assert_eq!(
            b.failed(t0 + Duration::from_secs(1), &p),
            Duration::from_secs(1)
        );
        b.started(t0 + Duration::from_secs(2));
        assert_eq!(
            b.failed(t0 + Duration::from_secs(3), &p),
            Duration::from_secs(2)
        );
        b.started(t0 + Duration::from_secs(5));
        // Up for 60 s: stable.
        assert_eq!(
            b.failed(t0 + Duration::from_secs(65), &p),
            Duration::from_secs(1)
        );
        assert_eq!(b.failures(), 1);
    }

    #[test]
    fn huge_failure_counts_saturate() {
        let p = RestartPolicy {
            max_backoff: Duration::MAX,
            ..policy()
        };
        let t0 = Instant::now();
        let mut b = Backoff::new();
        let mut last = Duration::ZERO;
        for _ in 0..100 {
            last = b.failed(t0, &p);
        }
        assert_eq!(last, Duration::from_secs(1u64 << 31));
    }
}
