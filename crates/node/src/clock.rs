//! Time, injected: the replica core and the cluster agent read the clock only through a
//! [`Clock`], so the deterministic simulation runs them on simulated time.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch from the system clock (0 if the clock is before 1970).
pub fn system_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A source of time in milliseconds.
pub trait Clock {
    /// Wall-clock milliseconds since the Unix epoch: the physical part of hybrid logical
    /// timestamps (may jump, may differ between nodes).
    fn wall_ms(&self) -> u64;
    /// Monotonic milliseconds since an arbitrary origin: timers and timeouts.
    fn mono_ms(&self) -> u64;
}

/// The system's clocks (wall clock shifted by a configured skew, a testing knob).
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
    skew_ms: i64,
}

impl SystemClock {
    /// The system clock; `skew_ms` is added to wall-clock readings (0 in production).
    pub fn new(skew_ms: i64) -> SystemClock {
        SystemClock {
            origin: Instant::now(),
            skew_ms,
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new(0)
    }
}

impl Clock for SystemClock {
    fn wall_ms(&self) -> u64 {
        system_now_ms().saturating_add_signed(self.skew_ms)
    }

    fn mono_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }
}

/// A clock that moves only when told to: simulated time for the deterministic simulation
/// and tests. Both readings start at `start_ms` and advance together; the wall clock can
/// carry a skew, as a node whose clock is off would.
#[derive(Debug)]
pub struct ManualClock {
    now: std::sync::atomic::AtomicU64,
    skew_ms: std::sync::atomic::AtomicI64,
}

impl ManualClock {
    /// A clock reading `start_ms` (ms since the Unix epoch).
    pub fn new(start_ms: u64) -> ManualClock {
        ManualClock {
            now: std::sync::atomic::AtomicU64::new(start_ms),
            skew_ms: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// Sets the time.
    pub fn set(&self, now_ms: u64) {
        self.now.store(now_ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Moves the time forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sets the skew added to wall-clock readings.
    pub fn set_skew(&self, skew_ms: i64) {
        self.skew_ms
            .store(skew_ms, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn wall_ms(&self) -> u64 {
        self.now
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_add_signed(self.skew_ms.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn mono_ms(&self) -> u64 {
        self.now.load(std::sync::atomic::Ordering::Relaxed)
    }
}
