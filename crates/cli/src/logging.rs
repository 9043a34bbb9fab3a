//! Log output of the long-running commands (`local`, `server`, `routing`, `faas`): a
//! filter that keeps other crates' chatter out by default, and text or JSON lines.

use std::io::IsTerminal as _;
use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;

/// How log lines are written (`--log-format`, `LATTICEKV_LOG_FORMAT`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// One human-readable line per event (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields`, …), for log
    /// collectors.
    Json,
}

/// The level of every crate unless `LATTICEKV_LOG` or `RUST_LOG` says otherwise: this
/// crate's `info`, but only warnings from libraries that log routine work at `info` (the
/// LSM tree's flushes and compactions, HTTP and TLS internals, the Kubernetes client).
pub(crate) const DEFAULT_FILTER: &str =
    "info,lsm_tree=warn,fjall=warn,hyper=warn,hyper_util=warn,rustls=warn,kube=warn,kube_client=warn,tower=warn";

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Records the format chosen on the command line, for [`init`] (called once, by `main`).
pub(crate) fn set_format(format: LogFormat) {
    let _ = FORMAT.set(format);
}

/// A line about the process's own life ("stopping…", "stopped"): as it is on stderr, or,
/// with `--log-format json`, as an `info` event, so that every line on stderr is JSON.
pub(crate) fn note(line: &str) {
    if FORMAT.get() == Some(&LogFormat::Json) {
        tracing::info!("{line}");
    } else {
        esay!("{line}");
    }
}

/// The filter: `LATTICEKV_LOG` if set, else `RUST_LOG`, else [`DEFAULT_FILTER`]. An
/// unparsable directive string falls back to the default rather than logging nothing.
pub(crate) fn filter(latticekv_log: Option<&str>, rust_log: Option<&str>) -> EnvFilter {
    latticekv_log
        .or(rust_log)
        .and_then(|s| EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_FILTER))
}

/// Installs the global subscriber, writing to stderr.
pub(crate) fn init() {
    let env = |k| std::env::var(k).ok();
    let filter = filter(env("LATTICEKV_LOG").as_deref(), env("RUST_LOG").as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match FORMAT.get().copied().unwrap_or_default() {
        // Colour codes only on a terminal: not in files, pipes or `docker logs`.
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    // Already installed (a second call in the same process): keep the first.
    drop(result);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// Which of an `info` event from `lsm_tree` and one from `latticekv` pass `filter`.
    fn passes(filter: EnvFilter) -> (bool, bool) {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "lsm_tree", "flushed memtable");
            tracing::info!(target: "latticekv", "node started");
        });
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        (
            text.contains("flushed memtable"),
            text.contains("node started"),
        )
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_default_hides_library_info_but_not_ours() {
        assert_eq!(passes(filter(None, None)), (false, true));
    }

    #[test]
    fn latticekv_log_then_rust_log_override_the_default() {
        assert_eq!(passes(filter(None, Some("lsm_tree=info"))), (true, false));
        assert_eq!(passes(filter(Some("info"), Some("off"))), (true, true));
        assert_eq!(passes(filter(Some("warn"), None)), (false, false));
    }
}
