//! When a connection waiting for bytes has waited too long: the partial-request and idle
//! timeouts, as a sans-I/O clock the connection pipeline ([`super::pipeline`]) reports to.

use std::time::{Duration, Instant};

/// When a connection waiting for bytes has waited too long (sans-I/O: the pipeline reports
/// what happened, and asks for the deadline of its next read).
///
/// - While an incomplete request is in the buffer, it must be complete within the
///   partial-request timeout of the read that brought its first bytes (a client trickling
///   one byte now and then cannot keep a connection and its buffer forever).
/// - With nothing pending, the connection may stay idle for the idle timeout after its last
///   activity, unless it waits for pushes.
#[derive(Clone, Debug)]
pub struct ReadClock {
    idle: Option<Duration>,
    partial: Option<Duration>,
    last_activity: Instant,
    partial_since: Option<Instant>,
}

impl ReadClock {
    /// A clock for a connection opened at `now`.
    pub fn new(idle: Option<Duration>, partial: Option<Duration>, now: Instant) -> Self {
        ReadClock {
            idle,
            partial,
            last_activity: now,
            partial_since: None,
        }
    }

    /// Bytes arrived at `at`, and the buffer was then processed: `completed` is whether a
    /// request was taken from it, `pending` whether bytes of an incomplete request remain.
    pub fn read(&mut self, at: Instant, completed: bool, pending: bool) {
        self.last_activity = at;
        self.partial_since = match (pending, self.partial_since) {
            (false, _) => None,
            // The request still incomplete began in this read if one before it completed.
            (true, Some(since)) if !completed => Some(since),
            (true, _) => Some(at),
        };
    }

    /// Something was sent to the connection at `at` (a push): it is not idle.
    pub fn pushed(&mut self, at: Instant) {
        self.last_activity = at;
    }

    /// The instant by which bytes must arrive, if any: `waits_for_pushes` exempts an idle
    /// connection from the idle timeout. A timeout too long to add to an `Instant` (a
    /// configured `u64` of seconds) is no deadline, never a panic.
    pub fn deadline(&self, waits_for_pushes: bool) -> Option<Instant> {
        match self.partial_since {
            Some(since) => self.partial.and_then(|t| since.checked_add(t)),
            None if waits_for_pushes => None,
            None => self.idle.and_then(|t| self.last_activity.checked_add(t)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// Found by the config fuzz target: `idle_timeout_secs` or
    /// `partial_request_timeout_secs` near `i64::MAX` made every connection's deadline
    /// overflow `Instant` and panic its task.
    #[test]
    fn a_timeout_too_long_for_an_instant_is_no_deadline() {
        let t0 = Instant::now();
        let forever = Duration::from_secs(i64::MAX as u64);
        let mut c = ReadClock::new(Some(forever), Some(forever), t0);
        assert_eq!(c.deadline(false), None);
        c.read(t0 + S, false, true);
        assert_eq!(c.deadline(false), None);
    }

    #[test]
    fn no_deadline_without_timeouts() {
        let t0 = Instant::now();
        let mut c = ReadClock::new(None, None, t0);
        assert_eq!(c.deadline(false), None);
        c.read(t0 + S, false, true);
        assert_eq!(c.deadline(false), None);
    }

    #[test]
    fn an_incomplete_request_must_finish_within_the_partial_timeout_of_its_first_bytes() {
        let t0 = Instant::now();
        let mut c = ReadClock::new(None, Some(30 * S), t0);
        assert_eq!(c.deadline(false), None, "idle: no idle timeout set");
        // The first bytes of a request at t0 + 1 s; more trickle in, none completes it.
        c.read(t0 + S, false, true);
        assert_eq!(c.deadline(false), Some(t0 + 31 * S));
        c.read(t0 + 20 * S, false, true);
        assert_eq!(
            c.deadline(false),
            Some(t0 + 31 * S),
            "trickling does not extend it"
        );
        // Subscribers get no exemption from it.
        assert_eq!(c.deadline(true), Some(t0 + 31 * S));
        // It completes, and the next one begins in the same read.
        c.read(t0 + 25 * S, true, true);
        assert_eq!(c.deadline(false), Some(t0 + 55 * S));
        // Nothing pending any more.
        c.read(t0 + 26 * S, true, false);
        assert_eq!(c.deadline(false), None);
    }

    #[test]
    fn an_idle_connection_is_closed_after_the_idle_timeout_unless_it_waits_for_pushes() {
        let t0 = Instant::now();
        let mut c = ReadClock::new(Some(10 * S), Some(30 * S), t0);
        assert_eq!(c.deadline(false), Some(t0 + 10 * S));
        assert_eq!(c.deadline(true), None);
        c.read(t0 + 5 * S, true, false);
        assert_eq!(c.deadline(false), Some(t0 + 15 * S));
        c.pushed(t0 + 8 * S);
        assert_eq!(c.deadline(false), Some(t0 + 18 * S));
        // While a request is incomplete, the partial timeout applies instead.
        c.read(t0 + 9 * S, false, true);
        assert_eq!(c.deadline(false), Some(t0 + 39 * S));
    }
}
