//! The scripts running now on a node's workers, for `SCRIPT KILL`.
//!
//! A script runs on one worker's thread and blocks it until it ends, so `SCRIPT KILL` can
//! only be served by a connection on *another* worker: it raises the run's kill flag, which
//! the run's instruction hook reads at its next check ([`super::HOOK_EVERY`] instructions).
//! As in Redis, a script that has already called a write command cannot be killed (its
//! writes would be half applied): `UNKILLABLE`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// `SCRIPT KILL` asked the run to stop.
const KILL: u8 = 1;
/// The run called a write command.
const WROTE: u8 = 2;

/// One run's flags, shared between its worker and `SCRIPT KILL`: `KILL` and `WROTE`,
/// changed atomically so that a run is either killed before its first write or not at all.
#[derive(Debug, Default)]
pub struct RunFlags {
    state: AtomicU8,
}

impl RunFlags {
    /// True once `SCRIPT KILL` asked this run to stop.
    pub fn kill_requested(&self) -> bool {
        self.state.load(Ordering::SeqCst) & KILL != 0
    }

    /// Called before a write command of the run: false if the run was killed (the write
    /// must not be made), else the run is marked as having written and can no longer be
    /// killed.
    pub fn try_write(&self) -> bool {
        self.state
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                (s & KILL == 0).then_some(s | WROTE)
            })
            .is_ok()
    }

    /// Asks the run to stop unless it has written: true if it was asked.
    fn try_kill(&self) -> bool {
        self.state
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                (s & WROTE == 0).then_some(s | KILL)
            })
            .is_ok()
    }
}

/// What `SCRIPT KILL` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillOutcome {
    /// No script was running.
    NotBusy,
    /// Every running script has written: nothing was killed.
    Unkillable,
    /// The running scripts that had not written were asked to stop.
    Killed,
}

/// The scripts running on a node's workers now.
#[derive(Debug, Default)]
pub struct Runs {
    running: Mutex<Vec<Arc<RunFlags>>>,
}

impl Runs {
    /// Registers a run starting now; it is unregistered when the guard drops.
    pub fn start(self: &Arc<Self>) -> RunGuard {
        let flags = Arc::new(RunFlags::default());
        self.lock().push(flags.clone());
        RunGuard {
            runs: self.clone(),
            flags,
        }
    }

    /// `SCRIPT KILL`: asks every running script that has not written to stop.
    pub fn kill(&self) -> KillOutcome {
        let running = self.lock();
        if running.is_empty() {
            return KillOutcome::NotBusy;
        }
        // Not `all`: every run that can be killed is.
        let killed = running.iter().filter(|r| r.try_kill()).count();
        if killed == 0 {
            KillOutcome::Unkillable
        } else {
            KillOutcome::Killed
        }
    }

    /// How many scripts are running.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<RunFlags>>> {
        // The list stays consistent whatever panicked while holding it.
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A registered run: unregisters it when dropped.
#[derive(Debug)]
pub struct RunGuard {
    runs: Arc<Runs>,
    flags: Arc<RunFlags>,
}

impl RunGuard {
    /// The run's flags.
    pub fn flags(&self) -> &Arc<RunFlags> {
        &self.flags
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let mut running = self.runs.lock();
        if let Some(i) = running.iter().position(|r| Arc::ptr_eq(r, &self.flags)) {
            running.swap_remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_stops_runs_that_have_not_written() {
        let runs = Arc::new(Runs::default());
        assert_eq!(runs.kill(), KillOutcome::NotBusy);
        let a = runs.start();
        let b = runs.start();
        assert_eq!(runs.count(), 2);
        assert_eq!(runs.kill(), KillOutcome::Killed);
        assert!(a.flags().kill_requested() && b.flags().kill_requested());
        drop(a);
        drop(b);
        assert_eq!(runs.kill(), KillOutcome::NotBusy);
        let c = runs.start();
        assert!(c.flags().try_write());
        assert_eq!(runs.kill(), KillOutcome::Unkillable);
        assert!(!c.flags().kill_requested());
        assert!(c.flags().try_write(), "writes go on");
        let d = runs.start();
        assert_eq!(runs.kill(), KillOutcome::Killed, "d had not written");
        assert!(!d.flags().try_write(), "a killed run makes no write");
        assert!(!c.flags().kill_requested());
        drop((c, d));
        assert_eq!(runs.count(), 0);
    }
}
