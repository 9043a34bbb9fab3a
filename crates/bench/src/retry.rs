//! `--follow-topology`: the operations of a round that are sent again once the route is
//! refreshed, instead of counting as errors.
//!
//! A cluster that changes under a run redirects requests (a node joined and took keys, or
//! a node is leaving and its keys moved) and closes connections (a node left). A client
//! that follows the topology, as the Rust client does, sends such an operation again where
//! the new placement says; so does the load generator: an operation that was redirected,
//! whose worker could not be reached, or whose connection was lost (if sending it twice
//! is harmless) waits for a route newer than the one it used and is sent again, at most
//! [`MAX_ATTEMPTS`] times. Its latency runs from its first send to the answer that ended
//! it, waits included, so the change shows as latency, not as errors. An operation still
//! failing after the last attempt, or when the run stops, is an error.

use std::time::{Duration, Instant};

use crate::args::WriteType;
use crate::clock::micros;
use crate::workload::{Action, Slot};

/// Most sends of one operation (the first included).
pub(crate) const MAX_ATTEMPTS: usize = 8;

/// Longest wait for a newer route before an attempt (the coordinator fetches one at least
/// every second; a fetch that fails leaves the route as it is, and the attempt goes on
/// with it).
pub(crate) const ROUTE_WAIT: Duration = Duration::from_millis(1_200);

/// Why an operation is sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The worker answered that another one holds the key.
    Redirected,
    /// The worker could not be connected to.
    Unreachable,
    /// The connection failed after the operation was sent.
    Lost,
    /// The worker sent no answer within the answer bound.
    Silent,
}

/// Operations sent again, by cause (what `--follow-topology` did in a run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Resends {
    /// Redirected by the worker they were sent to.
    pub redirected: u64,
    /// Their worker could not be connected to.
    pub unreachable: u64,
    /// Their connection failed after they were sent.
    pub lost: u64,
    /// Their worker did not answer within a second.
    pub silent: u64,
}

impl Resends {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.redirected + self.unreachable + self.lost + self.silent
    }

    pub(crate) fn add(&mut self, other: &Resends) {
        self.redirected += other.redirected;
        self.unreachable += other.unreachable;
        self.lost += other.lost;
        self.silent += other.silent;
    }
}

/// The operations of a round to send again, and since when each has waited.
#[derive(Debug, Default)]
pub(crate) struct Retry {
    /// Per slot of the round: when its last attempt failed, if it is to be sent again.
    since: Vec<Option<Instant>>,
    pending: usize,
    /// Operations marked since the last [`Retry::take_counts`], by cause.
    counts: Resends,
}

impl Retry {
    /// Starts a round of `n` operations: none to send again.
    pub(crate) fn reset(&mut self, n: usize) {
        self.since.clear();
        self.since.resize(n, None);
        self.pending = 0;
    }

    /// Operation `i` failed at `at` for `cause`, in a way that sending it again may fix.
    pub(crate) fn mark(&mut self, i: usize, at: Instant, cause: Cause) {
        if let Some(s) = self.since.get_mut(i) {
            if s.is_none() {
                self.pending += 1;
                let n = match cause {
                    Cause::Redirected => &mut self.counts.redirected,
                    Cause::Unreachable => &mut self.counts.unreachable,
                    Cause::Lost => &mut self.counts.lost,
                    Cause::Silent => &mut self.counts.silent,
                };
                *n += 1;
            }
            *s = Some(at);
        }
    }

    /// The operations marked since the last call, by cause (and starts counting again).
    pub(crate) fn take_counts(&mut self) -> Resends {
        std::mem::take(&mut self.counts)
    }

    /// Whether operation `i` is to be sent again.
    #[cfg(test)]
    pub(crate) fn is_marked(&self, i: usize) -> bool {
        matches!(self.since.get(i), Some(Some(_)))
    }

    /// Whether any operation is to be sent again.
    pub(crate) fn any(&self) -> bool {
        self.pending > 0
    }

    /// Before sending the marked operations again at `now`: each is charged the time it
    /// waited since its failure, and unmarked. Returns, per slot, whether it is sent.
    pub(crate) fn resend(&mut self, slots: &mut [Slot], now: Instant, picked: &mut Vec<bool>) {
        picked.clear();
        for (i, since) in self.since.iter_mut().enumerate() {
            let marked = since.take();
            if let (Some(at), Some(slot)) = (marked, slots.get_mut(i)) {
                slot.latency_us += micros(now.saturating_duration_since(at));
                slot.resent = slot.resent.saturating_add(1);
            }
            picked.push(marked.is_some());
        }
        self.pending = 0;
    }

    /// No more attempts: the marked operations are errors (charged their wait until `now`).
    pub(crate) fn give_up(&mut self, slots: &mut [Slot], now: Instant) {
        for (i, since) in self.since.iter_mut().enumerate() {
            if let (Some(at), Some(slot)) = (since.take(), slots.get_mut(i)) {
                slot.latency_us += micros(now.saturating_duration_since(at));
                slot.error = true;
            }
        }
        self.pending = 0;
    }
}

/// Whether an operation whose connection was lost after it was sent may be sent again:
/// everything but a single counter increment (`--batch 1`), the one request that is not
/// idempotent (batched writes carry cumulative counter entries, merged idempotently).
pub(crate) fn resendable_after_loss(action: Action, write_type: WriteType, batch: usize) -> bool {
    !(action == Action::Write && write_type == WriteType::Counter && batch <= 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::OpKind;

    #[test]
    fn marked_operations_are_resent_with_their_wait_or_given_up_as_errors() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut slots = vec![Slot::new(1, OpKind::Read, 0); 3];
        let mut r = Retry::default();
        r.reset(3);
        assert!(!r.any());
        r.mark(1, t0, Cause::Redirected);
        r.mark(1, t0 + ms(1), Cause::Silent); // marked already: counted once
        r.mark(9, t0, Cause::Lost); // out of range: ignored
        assert!(r.any() && r.is_marked(1) && !r.is_marked(0));
        let mut picked = Vec::new();
        r.resend(&mut slots, t0 + ms(101), &mut picked);
        assert_eq!(picked, [false, true, false]);
        assert_eq!(slots[1].latency_us, 100_000);
        assert_eq!((slots[0].resent, slots[1].resent), (0, 1));
        assert!(!r.any() && !r.is_marked(1));
        r.mark(2, t0 + ms(200), Cause::Unreachable);
        r.give_up(&mut slots, t0 + ms(250));
        assert!(slots[2].error && !slots[1].error && !slots[0].error);
        assert_eq!(slots[2].latency_us, 50_000);
        assert!(!r.any());
        let counts = r.take_counts();
        assert_eq!(
            (counts.redirected, counts.unreachable, counts.total()),
            (1, 1, 2)
        );
        assert_eq!(r.take_counts(), Resends::default());
    }

    #[test]
    fn only_a_single_counter_increment_is_not_sent_twice() {
        assert!(resendable_after_loss(Action::Read, WriteType::Counter, 1));
        assert!(resendable_after_loss(Action::Write, WriteType::Lww, 1));
        assert!(resendable_after_loss(Action::Write, WriteType::Counter, 8));
        assert!(!resendable_after_loss(Action::Write, WriteType::Counter, 1));
    }
}
