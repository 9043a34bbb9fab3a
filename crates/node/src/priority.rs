//! Scheduling priority of background threads: work that no request waits for yields the
//! CPU to the threads that serve requests when both want it.
//!
//! On Linux the nice value belongs to a thread and is inherited by the threads it starts,
//! so lowering it on a thread before it starts a component (a disk-tier node's LSM, whose
//! flush and compaction threads start when it opens) lowers the whole component. Lowering
//! needs no privilege; it cannot be raised back without one, hence a thread of its own.
//!
//! Only work nobody waits for is lowered: LSM flushes and compactions, snapshots. A disk
//! node's workers keep their priority: they answer the memory tier's fetches and
//! anti-entropy steps, which time out if a busy memory worker starves them (lowering the
//! whole disk node was tried: under a sustained load on one shared core its first
//! anti-entropy session timed out, `bench/background`).

/// How far background threads are lowered: at nice 10 a busy thread gets about a tenth of a
/// contended core against one at nice 0 (CFS weights 110 and 1024), and all of an idle one.
pub(crate) const BACKGROUND_NICE: i32 = 10;

/// Runs `f` on a new thread lowered by [`BACKGROUND_NICE`] and returns its result: threads
/// `f` starts keep the lower priority after it returns.
pub(crate) fn lowered<T: Send>(f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    std::thread::scope(|s| {
        let t = std::thread::Builder::new()
            .name("lkv-lowered".into())
            .spawn_scoped(s, || {
                lower_this_thread(BACKGROUND_NICE);
                f()
            })?;
        t.join()
            .map_err(|_| std::io::Error::other("a lowered start-up thread panicked"))
    })
}

/// Lowers the calling thread's priority by `by` nice steps (and so that of every thread it
/// starts afterwards). Best effort: where it fails or is unsupported, nothing changes.
pub(crate) fn lower_this_thread(by: i32) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: nice(2) changes only the calling thread's scheduling priority; errno is
        // cleared first because -1 is also a valid new nice value.
        let failed = unsafe {
            *libc::__errno_location() = 0;
            libc::nice(by) == -1 && *libc::__errno_location() != 0
        };
        if failed {
            tracing::debug!(error = %std::io::Error::last_os_error(), "could not lower a thread's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = by;
}

/// The calling thread's nice value (Linux; 0 elsewhere).
#[cfg(test)]
fn this_thread_nice() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpriority(2) reads the calling thread's priority (who = 0).
        unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
    }
    #[cfg(not(target_os = "linux"))]
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn lowering_a_thread_lowers_it_and_the_threads_it_starts_but_not_others() {
        let before = this_thread_nice();
        let (own, child) = std::thread::spawn(|| {
            lower_this_thread(3);
            let own = this_thread_nice();
            let child = std::thread::spawn(this_thread_nice).join().unwrap();
            (own, child)
        })
        .join()
        .unwrap();
        assert_eq!(own, (before + 3).min(19));
        assert_eq!(child, own, "a thread started afterwards inherits it");
        assert_eq!(this_thread_nice(), before, "other threads keep theirs");
    }
}
