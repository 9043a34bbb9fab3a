//! How far a start's replay of the write-ahead logs has come, for whoever shows it (the
//! command line draws a progress bar on a terminal). Replay reads every worker's newest
//! snapshot and the log after it, in parallel; the total is the size of those files, so
//! the progress is approximate (preallocated segments count their unused tail).

use std::path::Path;

/// Told how the replay of the write-ahead logs advances. Called from the replaying threads
/// (one per worker), a few times per MiB: implementations must be cheap.
pub trait ReplayProgress: Send + Sync {
    /// Replay starts: about `bytes` of log and snapshot files to read, all workers.
    fn begin(&self, bytes: u64);
    /// `bytes` more were replayed.
    fn advance(&self, bytes: u64);
    /// Replay ended, successfully or not.
    fn end(&self);
}

/// No one watches.
impl ReplayProgress for () {
    fn begin(&self, _: u64) {}
    fn advance(&self, _: u64) {}
    fn end(&self) {}
}

/// Bytes replayed between two calls of [`ReplayProgress::advance`].
pub(crate) const REPORT_EVERY: u64 = 1 << 20;

/// Bytes of the log and snapshot files in a worker's log directory (0 if it is missing).
pub(crate) fn files_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.ends_with(".log") || name.ends_with(".snap")
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}
