//! The node's metrics in the Prometheus text format (version 0.0.4), rendered from a
//! snapshot of its workers' statistics: no I/O here (the HTTP listener is `front::http`).
//!
//! Names start with `latticekv_`; per-worker series carry a `worker` label, and every series
//! the node's `node` and `tier` labels, so a cluster's nodes can be scraped into one
//! Prometheus. No key names or values appear: the endpoint exposes counts only (hot keys
//! are on the status page and in `latticekv status`). The list, with what each measures,
//! is in docs/operations.md.

use std::fmt::Write;

use crate::driver::worker::WorkerStats;
use crate::stats::latency::Cumulative;

mod policy;
pub mod status;
mod storage;

/// Upper bounds (seconds) of the request-latency histogram's buckets.
pub const LATENCY_BUCKETS_S: [f64; 16] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5,
];

/// Members of the cluster as this node sees them, by status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Members {
    /// Alive.
    pub alive: u64,
    /// Suspected (silent for a while, not yet declared dead).
    pub suspect: u64,
    /// Declared dead.
    pub dead: u64,
}

/// What the metrics are rendered from.
pub struct Snapshot<'a> {
    /// The node's id.
    pub node_id: &'a str,
    /// Its tier (`memory`, `disk`).
    pub tier: &'a str,
    /// Seconds since it started.
    pub uptime_seconds: u64,
    /// Its memory budget, bytes.
    pub memory_budget_bytes: u64,
    /// Every worker's statistics.
    pub workers: &'a [WorkerStats],
    /// The cluster's members.
    pub members: Members,
    /// The elasticity monitor's latest report, if one came.
    pub policy: Option<&'a wire::pb::PolicyReport>,
    /// The node's wall clock, ms since the Unix epoch (the report's age).
    pub now_ms: u64,
}

/// A per-worker series: name, help, how to read it.
type Series = (&'static str, &'static str, fn(&WorkerStats) -> u64);

/// Escapes a label value (backslash, double quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Out {
    text: String,
    labels: String,
}

impl Out {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP latticekv_{name} {help}");
        let _ = writeln!(self.text, "# TYPE latticekv_{name} {kind}");
    }

    fn one(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.head(name, kind, help);
        let _ = writeln!(self.text, "latticekv_{name}{{{}}} {value}", self.labels);
    }

    /// A sample of `name` with `extra` labels (after the node's).
    fn labelled(&mut self, name: &str, extra: &str, value: impl std::fmt::Display) {
        let _ = writeln!(
            self.text,
            "latticekv_{name}{{{},{extra}}} {value}",
            self.labels
        );
    }

    /// A series per worker.
    fn per_worker(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        workers: &[WorkerStats],
        value: impl Fn(&WorkerStats) -> u64,
    ) {
        self.head(name, kind, help);
        for w in workers {
            let _ = writeln!(
                self.text,
                "latticekv_{name}{{{},worker=\"{}\"}} {}",
                self.labels,
                w.worker,
                value(w)
            );
        }
    }
}

/// The metrics of `s`, in the Prometheus text format.
pub fn render(s: &Snapshot<'_>) -> String {
    let mut o = Out {
        text: String::with_capacity(8 << 10),
        labels: format!("node=\"{}\",tier=\"{}\"", label(s.node_id), label(s.tier)),
    };
    let version = env!("CARGO_PKG_VERSION");
    o.head("build_info", "gauge", "Always 1; the version in a label.");
    let _ = writeln!(
        o.text,
        "latticekv_build_info{{{},version=\"{version}\"}} 1",
        o.labels
    );
    o.one(
        "uptime_seconds",
        "gauge",
        "Seconds since the node started.",
        s.uptime_seconds,
    );
    o.one(
        "memory_budget_bytes",
        "gauge",
        "The node's memory budget for stored data.",
        s.memory_budget_bytes,
    );
    o.head(
        "cluster_members",
        "gauge",
        "Members of the cluster as this node sees them.",
    );
    for (status, n) in [
        ("alive", s.members.alive),
        ("suspect", s.members.suspect),
        ("dead", s.members.dead),
    ] {
        let _ = writeln!(
            o.text,
            "latticekv_cluster_members{{{},status=\"{status}\"}} {n}",
            o.labels
        );
    }
    let w = s.workers;
    // A name ending in `_total` is a counter, any other a gauge.
    let series: [Series; 19] = [
        ("operations_total", "Operations executed.", |w| {
            w.core.shard.requests
        }),
        (
            "storage_errors_total",
            "Operations refused because durable storage failed.",
            |w| w.core.shard.storage_errors,
        ),
        (
            "gossip_sent_total",
            "Gossip entries sent to other replicas.",
            |w| w.core.shard.gossip_sent,
        ),
        (
            "gossip_received_total",
            "Gossip entries merged from other replicas.",
            |w| w.core.shard.gossip_received,
        ),
        (
            "handed_off_total",
            "Keys handed to new owners after view changes.",
            |w| w.core.shard.handed_off,
        ),
        (
            "anti_entropy_repairs_total",
            "Anti-entropy exchanges that found differences.",
            |w| w.core.repairs,
        ),
        (
            "anti_entropy_sessions_total",
            "Anti-entropy sessions completed (every bucket compared with one peer).",
            |w| w.core.entropy_sessions,
        ),
        (
            "evictions_total",
            "Records evicted from RAM (demoted to the disk tier).",
            |w| w.core.shard.evictions,
        ),
        (
            "disk_fetches_total",
            "Keys fetched from the disk tier on a miss.",
            |w| w.core.shard.disk_fetches,
        ),
        (
            "demotions_total",
            "Records sent to the disk tier to be evicted (disk_copy = on_eviction).",
            |w| w.core.shard.demotions,
        ),
        (
            "window_accesses",
            "Key accesses in the last statistics window.",
            |w| w.window.accesses,
        ),
        ("keys", "Keys with a live value.", |w| {
            w.core.shard.live_keys
        }),
        (
            "stored_entries",
            "Entries stored: live values, tombstones, metadata.",
            |w| w.core.shard.stored_keys,
        ),
        (
            "data_bytes",
            "Approximate bytes of stored data in RAM.",
            |w| w.core.shard.bytes,
        ),
        ("connections", "Open client connections.", |w| w.connections),
        (
            "subscriptions",
            "Keys subscribed by client connections.",
            |w| w.subscriptions,
        ),
        (
            "replication_pending",
            "Replication entries not yet sent (changeset, outbox).",
            |w| w.core.shard.pending_replication,
        ),
        (
            "replication_batches_in_flight",
            "Replication batches not yet acknowledged.",
            |w| w.core.batches_in_flight,
        ),
        (
            "requests_in_flight",
            "Requests to other workers waiting for an answer.",
            |w| w.core.requests_in_flight,
        ),
    ];
    for (name, help, f) in series {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        o.per_worker(name, kind, help, w, f);
    }
    o.head(
        "worker_occupancy",
        "gauge",
        "Fraction of the last window the worker's thread was busy.",
    );
    for x in w {
        let _ = writeln!(
            o.text,
            "latticekv_worker_occupancy{{{},worker=\"{}\"}} {}",
            o.labels, x.worker, x.window.occupancy
        );
    }
    if w.iter().any(|x| x.window.disk_bytes.is_some()) {
        o.head(
            "disk_bytes",
            "gauge",
            "Bytes of data on disk (disk tier), when the last statistics window closed.",
        );
        for x in w {
            if let Some(d) = x.window.disk_bytes {
                o.labelled("disk_bytes", &format!("worker=\"{}\"", x.worker), d);
            }
        }
    }
    let mut total = Cumulative::default();
    for x in w {
        total.add(&x.latency_total);
    }
    latency_histogram(&mut o, &total);
    requests(&mut o, w);
    storage::render(&mut o, w);
    policy::render(&mut o, s.policy, s.now_ms);
    o.text
}

/// Requests and error replies by protocol and command, summed over the workers (only the
/// commands that ran).
fn requests(o: &mut Out, workers: &[WorkerStats]) {
    let mut sums: std::collections::BTreeMap<(&str, &str), (u64, u64)> = Default::default();
    for w in workers {
        for (protocol, command, n, errors) in w.requests.counts() {
            let s = sums.entry((protocol.name(), command)).or_default();
            s.0 += n;
            s.1 += errors;
        }
    }
    for (name, help, errors) in [
        (
            "requests_total",
            "Client requests, by protocol and command.",
            false,
        ),
        (
            "request_errors_total",
            "Client requests answered with an error, by protocol and command.",
            true,
        ),
    ] {
        o.head(name, "counter", help);
        for ((protocol, command), (n, e)) in &sums {
            let extra = format!("protocol=\"{protocol}\",command=\"{command}\"");
            o.labelled(name, &extra, if errors { *e } else { *n });
        }
    }
}

fn latency_histogram(o: &mut Out, h: &Cumulative) {
    o.cumulative_histogram(
        "request_duration_seconds",
        "Client requests from arrival to reply, all workers (pipelined requests: per batch).",
        h,
    );
}

impl Out {
    /// A histogram with [`LATENCY_BUCKETS_S`] from the counts of `h`.
    fn cumulative_histogram(&mut self, name: &str, help: &str, h: &Cumulative) {
        let buckets = LATENCY_BUCKETS_S.map(|le| (le, h.at_most((le * 1e9) as u64)));
        self.histogram(name, help, &buckets, h.count(), h.sum_ns() as f64 / 1e9);
    }

    /// A histogram: `buckets` are (upper bound in seconds, cumulative count).
    fn histogram(&mut self, name: &str, help: &str, buckets: &[(f64, u64)], count: u64, sum: f64) {
        self.head(name, "histogram", help);
        for (le, n) in buckets {
            let _ = writeln!(
                self.text,
                "latticekv_{name}_bucket{{{},le=\"{le}\"}} {n}",
                self.labels
            );
        }
        let _ = writeln!(
            self.text,
            "latticekv_{name}_bucket{{{},le=\"+Inf\"}} {count}",
            self.labels
        );
        let _ = writeln!(self.text, "latticekv_{name}_sum{{{}}} {sum}", self.labels);
        let _ = writeln!(
            self.text,
            "latticekv_{name}_count{{{}}} {count}",
            self.labels
        );
    }
}

#[cfg(test)]
mod status_tests;
#[cfg(test)]
mod tests;
