//! The serverless layer's metrics in the Prometheus text format: a scheduler's calls and a
//! compute host's causal cache. Pure: whoever serves HTTP appends this text to its own
//! (`latticekv local --faas` to its node's `/metrics`). Names start with `latticekv_faas_`;
//! docs/operations.md lists them.

use std::fmt::Write;

use crate::hydro::CacheStats;
use crate::scheduler::{SchedulerStats, CALL_BUCKETS_S};

/// Renders `scheduler`'s counters and those of the cache of compute host `host`, each if
/// given.
pub fn render(scheduler: Option<&SchedulerStats>, cache: Option<(&str, &CacheStats)>) -> String {
    let mut out = String::new();
    if let Some(s) = scheduler {
        render_scheduler(&mut out, s);
    }
    if let Some((host, c)) = cache {
        render_cache(&mut out, host, c);
    }
    out
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP latticekv_faas_{name} {help}");
    let _ = writeln!(out, "# TYPE latticekv_faas_{name} {kind}");
}

fn one(out: &mut String, name: &str, kind: &str, help: &str, labels: &str, value: u64) {
    head(out, name, kind, help);
    if labels.is_empty() {
        let _ = writeln!(out, "latticekv_faas_{name} {value}");
    } else {
        let _ = writeln!(out, "latticekv_faas_{name}{{{labels}}} {value}");
    }
}

fn render_scheduler(out: &mut String, s: &SchedulerStats) {
    head(
        out,
        "calls_total",
        "counter",
        "Calls answered by the scheduler, by protocol and outcome.",
    );
    for ((protocol, outcome), n) in &s.calls {
        let _ = writeln!(
            out,
            "latticekv_faas_calls_total{{protocol=\"{protocol}\",outcome=\"{outcome}\"}} {n}"
        );
    }
    let name = "call_duration_seconds";
    head(
        out,
        name,
        "histogram",
        "Calls from admission at the scheduler to the answer.",
    );
    let mut running = 0;
    for (le, n) in CALL_BUCKETS_S.iter().zip(s.duration_buckets) {
        running += n;
        let _ = writeln!(out, "latticekv_faas_{name}_bucket{{le=\"{le}\"}} {running}");
    }
    let count: u64 = s.duration_buckets.iter().sum();
    let _ = writeln!(out, "latticekv_faas_{name}_bucket{{le=\"+Inf\"}} {count}");
    let _ = writeln!(out, "latticekv_faas_{name}_sum {}", s.duration_sum_s);
    let _ = writeln!(out, "latticekv_faas_{name}_count {count}");
    one(
        out,
        "aborts_total",
        "counter",
        "Attempts of spread calls (OPT, CON, HB) aborted and run again.",
        "",
        s.aborts,
    );
    one(
        out,
        "retries_total",
        "counter",
        "Calls placed again because their compute host failed.",
        "",
        s.retries,
    );
    one(
        out,
        "runs",
        "gauge",
        "Calls in progress at the scheduler.",
        "",
        s.runs,
    );
    one(
        out,
        "queued_runs",
        "gauge",
        "Calls waiting for a compute host.",
        "",
        s.queued,
    );
    one(
        out,
        "hosts",
        "gauge",
        "Compute hosts connected to the scheduler.",
        "",
        s.hosts,
    );
    one(
        out,
        "gc_rounds_total",
        "counter",
        "Dependency-GC rounds completed (stable clocks sent to the caching hosts).",
        "",
        s.gc_rounds,
    );
    one(
        out,
        "gc_paused",
        "gauge",
        "1 while dependency-GC rounds are paused: another scheduler holds a lease on the store.",
        "",
        s.gc_paused,
    );
    one(
        out,
        "gc_skipped_total",
        "counter",
        "Dependency-GC rounds skipped because another scheduler held a lease.",
        "",
        s.gc_skipped,
    );
}

fn render_cache(out: &mut String, host: &str, c: &CacheStats) {
    let labels = format!("host=\"{}\"", host.replace(['\\', '"', '\n'], "_"));
    let series: [(&str, &str, &str, u64); 9] = [
        (
            "cache_hits_total",
            "counter",
            "Snapshots whose keys were all in the host's causal cache.",
            c.hits,
        ),
        (
            "cache_misses_total",
            "counter",
            "Snapshots that fetched from the store first.",
            c.misses,
        ),
        (
            "cache_pinned_runs",
            "gauge",
            "Runs holding pinned versions in the cache.",
            c.pinned_runs as u64,
        ),
        (
            "cache_keys",
            "gauge",
            "Keys in the cache's causal cut.",
            c.keys as u64,
        ),
        (
            "cache_bytes",
            "gauge",
            "Bytes in the cache's causal cut.",
            c.bytes as u64,
        ),
        (
            "cache_evicted_total",
            "counter",
            "Keys evicted from the cache.",
            c.evicted,
        ),
        (
            "cache_opt_aborts_total",
            "counter",
            "OPT validations at this cache that aborted.",
            c.opt_aborts,
        ),
        (
            "cache_remote_fetches_total",
            "counter",
            "Fetches of pinned versions from other caches.",
            c.remote_fetches,
        ),
        (
            "cache_pushes_total",
            "counter",
            "Values pushed by the store's subscriptions and merged.",
            c.pushes,
        ),
    ];
    for (name, kind, help, v) in series {
        one(out, name, kind, help, &labels, v);
    }
    head(
        out,
        "cache_deps",
        "gauge",
        "Keys each value of the cache's causal cut depends on: quantile 0.5, 0.99, and 1 (the largest).",
    );
    for (q, v) in [("0.5", c.deps_p50), ("0.99", c.deps_p99), ("1", c.deps_max)] {
        let _ = writeln!(
            out,
            "latticekv_faas_cache_deps{{{labels},quantile=\"{q}\"}} {v}"
        );
    }
    head(
        out,
        "cache_meta_bytes",
        "gauge",
        "Causal metadata (clocks and dependency lists, as the store encodes them) of each value of the cache's causal cut, in bytes: quantile 0.5, 0.99, and 1 (the largest).",
    );
    for (q, v) in [("0.5", c.meta_p50), ("0.99", c.meta_p99), ("1", c.meta_max)] {
        let _ = writeln!(
            out,
            "latticekv_faas_cache_meta_bytes{{{labels},quantile=\"{q}\"}} {v}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_calls_by_protocol_and_outcome_and_the_cache() {
        let mut s = SchedulerStats::default();
        s.calls.insert(("ct", "ok"), 3);
        s.calls.insert(("opt", "timeout"), 1);
        s.duration_buckets[0] = 2;
        s.duration_buckets[CALL_BUCKETS_S.len()] = 1;
        s.aborts = 4;
        let cache = CacheStats {
            hits: 5,
            misses: 2,
            pinned_runs: 1,
            deps_p99: 12,
            meta_p99: 640,
            ..CacheStats::default()
        };
        let text = render(Some(&s), Some(("local", &cache)));
        for line in [
            "latticekv_faas_calls_total{protocol=\"ct\",outcome=\"ok\"} 3",
            "latticekv_faas_calls_total{protocol=\"opt\",outcome=\"timeout\"} 1",
            "latticekv_faas_call_duration_seconds_bucket{le=\"0.0005\"} 2",
            "latticekv_faas_call_duration_seconds_bucket{le=\"60\"} 2",
            "latticekv_faas_call_duration_seconds_bucket{le=\"+Inf\"} 3",
            "latticekv_faas_aborts_total 4",
            "latticekv_faas_cache_hits_total{host=\"local\"} 5",
            "latticekv_faas_cache_pinned_runs{host=\"local\"} 1",
            "latticekv_faas_cache_deps{host=\"local\",quantile=\"0.99\"} 12",
            "latticekv_faas_cache_meta_bytes{host=\"local\",quantile=\"0.99\"} 640",
            "latticekv_faas_gc_paused 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert_eq!(render(None, None), "");
    }
}
