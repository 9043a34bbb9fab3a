//! A worker's mode towards its backing store: normal, failed, recovery (TARDIS), and when
//! to probe a store that is down.

/// Where a worker stands with its backing store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The store takes writes; policies apply as configured.
    Normal,
    /// The store is unavailable: writes buffer, reads of keys not in RAM fail.
    Failed,
    /// The store is back: the failed list drains.
    Recovery,
}

impl Mode {
    /// The name used in status.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Failed => "failed",
            Mode::Recovery => "recovery",
        }
    }

    /// The number used on the wire (status): 0 normal, 1 failed, 2 recovery.
    pub fn code(self) -> u32 {
        match self {
            Mode::Normal => 0,
            Mode::Failed => 1,
            Mode::Recovery => 2,
        }
    }

    /// The mode of a wire code (unknown codes read as failed: the cautious reading).
    pub fn from_code(code: u32) -> Mode {
        match code {
            0 => Mode::Normal,
            2 => Mode::Recovery,
            _ => Mode::Failed,
        }
    }
}

/// First pause between probes of a store that is down, ms.
const PROBE_MIN_MS: u64 = 100;

/// Mode transitions and probe pacing, without I/O (times are monotonic ms).
#[derive(Clone, Debug)]
pub struct ModeMachine {
    mode: Mode,
    /// Pause before the next probe, ms (doubles up to `max_ms`).
    backoff_ms: u64,
    max_ms: u64,
    /// When the next probe may go out (failed mode).
    probe_at: u64,
    /// When the current mode began.
    since: u64,
    /// Times the worker entered failed mode.
    failures: u64,
    /// Why the store last failed.
    last_error: Option<String>,
}

impl ModeMachine {
    /// Normal mode at `now`; probes pause at most `max_ms`.
    pub fn new(now: u64, max_ms: u64) -> ModeMachine {
        ModeMachine {
            mode: Mode::Normal,
            backoff_ms: PROBE_MIN_MS,
            max_ms: max_ms.max(PROBE_MIN_MS),
            probe_at: now,
            since: now,
            failures: 0,
            last_error: None,
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// When the mode began.
    pub fn since(&self) -> u64 {
        self.since
    }

    /// Times the worker entered failed mode.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Why the store last failed.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The store failed a request. Returns true if this entered failed mode (from normal
    /// or recovery); in failed mode it only pushes the next probe back.
    pub fn failed(&mut self, now: u64, why: String) -> bool {
        self.last_error = Some(why);
        if self.mode == Mode::Failed {
            self.backoff_ms = (self.backoff_ms * 2).min(self.max_ms);
            self.probe_at = now + self.backoff_ms;
            return false;
        }
        self.mode = Mode::Failed;
        self.since = now;
        self.failures += 1;
        self.backoff_ms = PROBE_MIN_MS;
        self.probe_at = now + self.backoff_ms;
        true
    }

    /// The store answered a request: failed mode moves on to recovery. Returns true if it
    /// did.
    pub fn succeeded(&mut self, now: u64) -> bool {
        if self.mode != Mode::Failed {
            return false;
        }
        self.mode = Mode::Recovery;
        self.since = now;
        self.backoff_ms = PROBE_MIN_MS;
        true
    }

    /// The failed list is empty: recovery ends. Returns true if it did.
    pub fn drained(&mut self, now: u64) -> bool {
        if self.mode != Mode::Recovery {
            return false;
        }
        self.mode = Mode::Normal;
        self.since = now;
        true
    }

    /// When a probe may go out (failed mode only).
    pub fn probe_at(&self) -> Option<u64> {
        (self.mode == Mode::Failed).then_some(self.probe_at)
    }

    /// A probe goes out now: the next waits for its outcome and then the backoff.
    pub fn probing(&mut self, now: u64) {
        self.probe_at = now + self.backoff_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_probes_back_off_then_recover_then_normal() {
        let mut m = ModeMachine::new(0, 1_000);
        assert_eq!(m.probe_at(), None);
        assert!(m.failed(10, "down".into()));
        assert_eq!(m.mode(), Mode::Failed);
        assert_eq!(m.probe_at(), Some(110));
        // Failed probes double the pause, up to the cap.
        let mut pauses = Vec::new();
        for t in [110, 400, 900, 2_000, 4_000] {
            assert!(!m.failed(t, "still down".into()));
            pauses.push(m.probe_at().unwrap() - t);
        }
        assert_eq!(pauses, [200, 400, 800, 1_000, 1_000]);
        assert!(m.succeeded(5_000));
        assert_eq!(m.mode(), Mode::Recovery);
        assert!(!m.succeeded(5_001), "recovery is not re-entered");
        // A failure during recovery is failed mode again, with a fresh backoff.
        assert!(m.failed(5_002, "again".into()));
        assert_eq!(m.probe_at(), Some(5_102));
        assert!(m.succeeded(6_000));
        assert!(m.drained(7_000));
        assert_eq!((m.mode(), m.failures()), (Mode::Normal, 2));
        assert!(!m.drained(7_001));
        for mode in [Mode::Normal, Mode::Failed, Mode::Recovery] {
            assert_eq!(Mode::from_code(mode.code()), mode);
        }
    }
}
