//! The progress bar of a node's start while it replays its write-ahead logs (a memory-tier
//! node with a data directory): bytes replayed of the logs' and snapshots' size. Drawn on
//! stderr only when stderr is a terminal, and only once there is at least
//! [`SHOW_FROM`] bytes to replay; cleared when replay ends.

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use node::driver::replay::ReplayProgress;

/// Less than this to replay takes a moment: no bar.
const SHOW_FROM: u64 = 8 << 20;

/// A [`ReplayProgress`] drawing an indicatif bar.
#[derive(Default)]
pub(crate) struct ReplayBar {
    bar: Mutex<Option<ProgressBar>>,
}

impl ReplayBar {
    fn with(&self, f: impl FnOnce(&ProgressBar)) {
        if let Some(bar) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            f(bar);
        }
    }
}

impl ReplayProgress for ReplayBar {
    fn begin(&self, bytes: u64) {
        if bytes < SHOW_FROM {
            return;
        }
        // Hidden by indicatif itself when stderr is not a terminal.
        let bar = ProgressBar::with_draw_target(Some(bytes), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "replaying the write-ahead log [{bar:24}] {binary_bytes}/{binary_total_bytes} \
                 {elapsed:>4}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        *self.bar.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar);
    }

    fn advance(&self, bytes: u64) {
        self.with(|b| b.inc(bytes));
    }

    fn end(&self) {
        if let Some(bar) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            bar.finish_and_clear();
        }
    }
}
