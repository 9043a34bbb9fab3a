//! The metrics of where writes go besides RAM: the write-ahead log (memory-tier workers
//! with a data directory), the LSM journal's fsyncs (disk-tier nodes) and the backing store
//! (nodes with `[backing]`). A family appears only on a node that has the part it measures.

use std::fmt::Write;

use store::wal::stats::FSYNC_BUCKETS_US;

use super::{Out, WorkerStats};
use crate::stats::latency::Cumulative;
use crate::writeback::Mode;

/// A per-worker WAL series: name, help, how to read it (None: the worker has no log).
type WalSeries = (&'static str, &'static str, fn(&WorkerStats) -> Option<u64>);

/// Appends the storage families of `workers` to `o`.
pub(super) fn render(o: &mut Out, workers: &[WorkerStats]) {
    wal(o, workers);
    lsm(o, workers);
    backing(o, workers);
}

fn wal(o: &mut Out, workers: &[WorkerStats]) {
    let logged: Vec<&WorkerStats> = workers.iter().filter(|w| w.wal.is_some()).collect();
    if logged.is_empty() {
        return;
    }
    let series: [WalSeries; 11] = [
        (
            "wal_appended_records_total",
            "Records appended to the write-ahead log.",
            |w| Some(w.wal.as_ref()?.log.appends),
        ),
        (
            "wal_appended_bytes_total",
            "Payload bytes appended to the write-ahead log.",
            |w| Some(w.wal.as_ref()?.log.append_bytes),
        ),
        (
            "wal_written_bytes_total",
            "Bytes written to log segments (records with their headers).",
            |w| Some(w.wal.as_ref()?.log.bytes_written),
        ),
        ("wal_fsyncs_total", "Fsyncs of log segments.", |w| {
            Some(w.wal.as_ref()?.log.fsyncs)
        }),
        (
            "wal_write_errors_total",
            "Failed writes to the log (including segment creation).",
            |w| Some(w.wal.as_ref()?.log.write_errors),
        ),
        ("wal_fsync_errors_total", "Failed fsyncs of the log.", |w| {
            Some(w.wal.as_ref()?.log.fsync_errors)
        }),
        (
            "wal_snapshots_total",
            "Snapshots of the store installed (they let old segments go).",
            |w| Some(w.wal.as_ref()?.log.snapshots),
        ),
        (
            "wal_snapshot_errors_total",
            "Snapshots that failed to be written.",
            |w| Some(w.wal.as_ref()?.log.snapshot_errors),
        ),
        (
            "wal_queue_bytes",
            "Bytes in the log's queue, waiting for its writer thread.",
            |w| Some(w.wal.as_ref()?.log.queued_bytes),
        ),
        (
            "wal_waiting_bytes",
            "Bytes waiting in the worker for room in the log's queue (back-pressure).",
            |w| Some(w.wal.as_ref()?.waiting_bytes),
        ),
        (
            "wal_failed",
            "1 while the log refuses appends after a disk failure, else 0.",
            |w| Some(u64::from(w.wal.as_ref()?.log.failed)),
        ),
    ];
    for (name, help, f) in series {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        o.head(name, kind, help);
        for w in &logged {
            let _ = writeln!(
                o.text,
                "latticekv_{name}{{{},worker=\"{}\"}} {}",
                o.labels,
                w.worker,
                f(w).unwrap_or(0)
            );
        }
    }
    // One fsync histogram for the node, as for requests.
    let mut counts = [0u64; FSYNC_BUCKETS_US.len() + 1];
    let mut micros = 0u64;
    let (mut snapshots, mut snapshot_micros) = (0u64, 0u64);
    for m in logged.iter().filter_map(|w| w.wal.as_ref()) {
        for (c, n) in counts.iter_mut().zip(m.log.fsync_histogram) {
            *c += n;
        }
        micros += m.log.fsync_micros;
        snapshots += m.snapshots;
        snapshot_micros += m.snapshot_micros;
    }
    fsync_histogram(
        o,
        "wal_fsync_duration_seconds",
        "Fsyncs of the write-ahead log's segments, all workers.",
        &counts,
        micros,
    );
    let name = "wal_snapshot_duration_seconds";
    o.head(
        name,
        "summary",
        "Snapshots written, all workers: from the decision to the installed file.",
    );
    let _ = writeln!(
        o.text,
        "latticekv_{name}_sum{{{}}} {}",
        o.labels,
        snapshot_micros as f64 / 1e6
    );
    let _ = writeln!(o.text, "latticekv_{name}_count{{{}}} {snapshots}", o.labels);
}

/// The LSM journal's fsyncs: one syncer per node, so node-wide series (every worker
/// reports the same figures; the first is taken).
fn lsm(o: &mut Out, workers: &[WorkerStats]) {
    let Some(m) = workers.iter().find_map(|w| w.lsm.as_ref()) else {
        return;
    };
    o.one(
        "lsm_fsyncs_total",
        "counter",
        "Fsyncs of the disk tier's LSM journal.",
        m.fsyncs,
    );
    o.one(
        "lsm_tables",
        "gauge",
        "Tables (SST files) of the disk tier's LSM, all levels.",
        m.tables,
    );
    o.one(
        "lsm_l0_tables",
        "gauge",
        "Tables in level 0 of the disk tier's LSM: flushes add them, compactions remove them.",
        m.l0_tables,
    );
    fsync_histogram(
        o,
        "lsm_fsync_duration_seconds",
        "Fsyncs of the disk tier's LSM journal.",
        &m.fsync_histogram,
        m.fsync_micros,
    );
}

/// A histogram of fsyncs from per-bucket (not cumulative) counts over [`FSYNC_BUCKETS_US`]
/// and an overflow bucket.
fn fsync_histogram(o: &mut Out, name: &str, help: &str, counts: &[u64], micros: u64) {
    let mut running = 0;
    let buckets: Vec<(f64, u64)> = FSYNC_BUCKETS_US
        .iter()
        .zip(counts)
        .map(|(us, n)| {
            running += n;
            (*us as f64 / 1e6, running)
        })
        .collect();
    let count = counts.iter().sum();
    o.histogram(name, help, &buckets, count, micros as f64 / 1e6);
}

/// A per-worker write-back series: name, help, how to read it.
type BackingSeries = (
    &'static str,
    &'static str,
    fn(&wire::pb::BackingStatus) -> u64,
);

fn backing(o: &mut Out, workers: &[WorkerStats]) {
    let backed: Vec<(u32, &wire::pb::BackingStatus)> = workers
        .iter()
        .filter_map(|w| Some((w.worker, w.backing.as_ref()?)))
        .collect();
    if backed.is_empty() {
        return;
    }
    o.head(
        "backing_mode",
        "gauge",
        "The worker's write-back mode: 1 for the current one (normal, failed, recovery).",
    );
    for (worker, b) in &backed {
        for mode in [Mode::Normal, Mode::Failed, Mode::Recovery] {
            let now = u64::from(mode.code() == b.mode);
            let _ = writeln!(
                o.text,
                "latticekv_backing_mode{{{},worker=\"{worker}\",mode=\"{}\"}} {now}",
                o.labels,
                mode.name()
            );
        }
    }
    let series: [BackingSeries; 10] = [
        (
            "backing_dirty_keys",
            "Keys whose changes the backing store does not have yet.",
            |b| b.dirty_keys,
        ),
        (
            "backing_dirty_bytes",
            "Bytes of the dirty keys' records (buffered for the store).",
            |b| b.dirty_bytes,
        ),
        (
            "backing_failed_keys",
            "Dirty keys on the failed list (written while the store was down).",
            |b| b.failed_keys,
        ),
        (
            "backing_applied_keys_total",
            "Keys applied to the backing store (one per key per batch).",
            |b| b.applied_keys,
        ),
        (
            "backing_apply_failures_total",
            "Batches the backing store failed.",
            |b| b.apply_failures,
        ),
        (
            "backing_fetched_keys_total",
            "Keys read through from the backing store.",
            |b| b.fetched_keys,
        ),
        (
            "backing_refused_reads_total",
            "Reads of keys not in RAM refused while the store was unavailable.",
            |b| b.refused_reads,
        ),
        (
            "backing_refused_writes_total",
            "Writes refused: the buffer was full while the store was unavailable.",
            |b| b.refused_writes,
        ),
        (
            "backing_failures_total",
            "Times the worker entered failed mode.",
            |b| b.failures,
        ),
        (
            "backing_mode_seconds",
            "Seconds the worker has been in its current mode.",
            |b| b.mode_ms / 1000,
        ),
    ];
    for (name, help, f) in series {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        o.head(name, kind, help);
        for (worker, b) in &backed {
            let _ = writeln!(
                o.text,
                "latticekv_{name}{{{},worker=\"{worker}\"}} {}",
                o.labels,
                f(b)
            );
        }
    }
    let mut total = Cumulative::default();
    for w in workers {
        total.add(&w.backing_latency);
    }
    o.cumulative_histogram(
        "backing_apply_duration_seconds",
        "Batches applied to the backing store, all workers: from sending to the answer.",
        &total,
    );
}
