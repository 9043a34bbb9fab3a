//! The progress bar on stderr while a run loads keys and measures: a bar of the keys loaded
//! (or the operations asked for with `--ops`), otherwise a line with the rate, the count
//! and the errors so far. Drawn only when stderr is a terminal, and not with `--quiet`:
//! piped or redirected output gets the report alone.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report::group_digits;
use crate::stats::Control;

/// How often the rate is recomputed.
const EVERY: Duration = Duration::from_millis(500);

/// The progress of one phase at a time.
pub(crate) struct Progress {
    bar: ProgressBar,
    last_print: Instant,
    last_completed: u64,
    /// Operations completed before this phase.
    base: u64,
    rate: f64,
}

impl Progress {
    /// A bar on stderr, hidden unless `enabled` (stderr that is not a terminal hides it too).
    pub(crate) fn new(enabled: bool) -> Progress {
        let target = if enabled {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        Progress {
            bar: ProgressBar::with_draw_target(None, target),
            last_print: Instant::now(),
            last_completed: 0,
            base: 0,
            rate: 0.0,
        }
    }

    /// Starts phase `label`, counting from `control`'s current count: a bar towards `total`
    /// operations if known, else a spinner.
    pub(crate) fn restart(&mut self, label: &str, control: &Control, total: Option<u64>) {
        self.last_print = Instant::now();
        self.last_completed = control.completed();
        self.base = self.last_completed;
        self.rate = 0.0;
        let style = match total {
            Some(_) => ProgressStyle::with_template("{prefix:<8} [{bar:24}] {percent:>3}%  {msg}"),
            None => ProgressStyle::with_template("{prefix:<8} {spinner} {elapsed:>4}  {msg}"),
        }
        .expect("a valid template")
        .progress_chars("=> ");
        self.bar.set_style(style);
        self.bar.set_prefix(label.to_string());
        self.bar.set_length(total.unwrap_or(0));
        self.bar.reset();
    }

    /// Shows the phase `label` with `control`'s count.
    pub(crate) fn tick(&mut self, label: &str, control: &Control) {
        let now = Instant::now();
        let completed = control.completed();
        let dt = now - self.last_print;
        if dt >= EVERY {
            self.rate = completed.saturating_sub(self.last_completed) as f64 / dt.as_secs_f64();
            self.last_print = now;
            self.last_completed = completed;
        }
        let done = completed.saturating_sub(self.base);
        self.bar.set_prefix(label.to_string());
        self.bar.set_position(done);
        self.bar.set_message(format!(
            "{} ops/s  {} ops  {} errors",
            group_digits(self.rate.round() as u64),
            group_digits(done),
            control.errors(),
        ));
    }

    /// Removes the bar.
    pub(crate) fn clear(&mut self) {
        self.bar.finish_and_clear();
    }
}
