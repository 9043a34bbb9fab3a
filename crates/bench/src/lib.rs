//! The latticekv load generator (`latticekv bench`).
//!
//! Drives YCSB-style (A, B, C, F, update-only) and redis-benchmark-style (`set`, `get`)
//! workloads against latticekv's RESP port, any Redis server, or latticekv's native protocol
//! (straight to the worker owning each key, optionally batched), and reports throughput and
//! per-operation latency percentiles.
//!
//! ```no_run
//! # async fn demo() -> Result<(), bench::BenchError> {
//! let args = bench::smoke_args("127.0.0.1:6380", bench::Protocol::Resp);
//! let report = bench::run(args).await?;
//! report.print_table(&mut std::io::stdout()).ok();
//! # Ok(()) }
//! ```
//!
//! # How it measures
//! - **Closed loop, rounds.** Every connection repeats *rounds*: it writes `--pipeline`
//!   requests (times `--batch` operations for native batches) with one write, then reads
//!   all their replies. A round's operations count if the round completes inside the
//!   measured window (after `--warmup`); throughput = those operations / the window.
//! - **Latency** of an operation = from the write of its round to the read that brought in
//!   its reply (one clock reading per read call), recorded in microseconds into one
//!   `hdrhistogram` per thread, merged at the end. A read-modify-write (workload `rmw`,
//!   YCSB F) sends the write after the read's reply and counts as one operation whose
//!   latency is the sum of both round trips. A batched native request's operations each get
//!   the request's latency.
//! - **Timeline** (`--timeline SECS`): the same, per interval of the measured phase, each
//!   round in the interval it completed in (one more clock reading per round), with the
//!   wall-clock time the measurement began so other observations can be lined up with it.
//! - **Threads.** `--threads` OS threads, each a tokio current-thread runtime owning
//!   `connections / threads` connections; nothing is shared on the hot path but two relaxed
//!   atomic counters bumped once per round.
//!
//! # Layout
//! - [`args`]: [`BenchArgs`] (the clap flags), their enums and validation, [`smoke_args`].
//! - [`keys`]: key formatting and the precomputed key and value bytes.
//! - [`zipf`]: the exact Zipf sampler (inverse CDF) and the scrambled [`KeyChooser`].
//! - [`workload`]: operation mixes and per-round operation slots.
//! - [`proto`]: allocation-free native request encoding and response scanning.
//! - `resp`, `native`, `session`: the protocol drivers (one task per connection).
//! - `retry`: with `--follow-topology`, the operations of a round sent again once the
//!   route is refreshed (redirected, worker unreachable, connection lost).
//! - `setup`: what the drivers share with the runner: the run's setup, native routing,
//!   client-side lattice numbers, a connection's context and operation source.
//! - `clock`: microsecond and wall-clock helpers.
//! - [`stats`]: run phases, round accounting, per-thread histograms.
//! - `runner`: threads, coordinator, progress line, load phase.
//! - [`report`]: [`Report`], as a table or JSON.
//! - [`error`]: the error enum, [`BenchError`].
//!
//! Depends on `wire` (RESP reply parser, frame format, protobuf types), `client` (topology
//! and key placement), `lattice` (HLC).
#![warn(missing_docs)]

pub mod args;
mod clock;
pub mod error;
pub mod keys;
mod native;
mod pace;
mod progress;
pub mod proto;
pub mod report;
mod resp;
mod retry;
mod runner;
mod session;
mod setup;
pub mod stats;
pub mod workload;
pub mod zipf;

pub use args::{smoke_args, BenchArgs, Distribution, LoadKeys, Protocol, Workload, WriteType};
pub use error::BenchError;
pub use report::{Latency, LoadReport, Report, Timeline, TimelinePoint};
pub use zipf::{KeyChooser, Zipf};

/// Runs the benchmark described by `args`: the optional load phase, the warm-up, then the
/// measured phase. Prints a progress line on stderr unless `args.quiet`; prints nothing on
/// stdout (print the [`Report`] with [`Report::print`]).
///
/// Uses `args.threads` OS threads of its own; the calling runtime only coordinates (it must
/// have tokio's time and I/O drivers enabled, e.g. `Builder::new_current_thread().enable_all()`).
///
/// # Errors
/// Bad flags, a connection that cannot be opened or fails during the run, an unreadable
/// reply, error replies during the load phase. Error replies during the measured phase are
/// not failures: they are counted in [`Report::errors`].
pub async fn run(args: BenchArgs) -> Result<Report, BenchError> {
    runner::run(args).await
}

/// Runs the benchmark and prints the report on stdout (JSON if `args.json`, else a table).
///
/// # Errors
/// As [`run`].
pub async fn run_and_print(args: BenchArgs) -> Result<Report, BenchError> {
    let json = args.json;
    let report = run(args).await?;
    let mut stdout = std::io::stdout().lock();
    // A closed stdout (e.g. `| head`) is not a benchmark failure.
    let _ = report.print(&mut stdout, json);
    Ok(report)
}
