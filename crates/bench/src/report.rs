//! The result of a run: [`Report`], printable as a table or as JSON.

use std::io::{self, Write};

use serde::Serialize;

use crate::args::{Distribution, Protocol, Workload};
pub use crate::retry::Resends;

/// Per-operation latency, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// The load phase's result.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LoadReport {
    /// Keys written.
    pub keys: u64,
    /// Seconds it took.
    pub secs: f64,
    /// Writes per second.
    pub ops_per_sec: f64,
}

/// One interval of the timeline (`--timeline`): the rounds completed in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TimelinePoint {
    /// End of the interval, in seconds since the measured phase began (the last one ends
    /// with the run).
    pub end_secs: f64,
    /// Operations completed.
    pub ops: u64,
    /// Operations per second over the interval.
    pub ops_per_sec: f64,
    /// Those that got an error reply.
    pub errors: u64,
    /// Times they were sent again (`--follow-topology`: redirected, unreachable, lost or
    /// unanswered; their latency counts from the first send).
    pub resent: u64,
    /// Their latency (two significant digits; zeros for an interval without operations).
    pub latency_us: Latency,
}

/// Throughput and latency per interval of the measured phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timeline {
    /// Length of an interval, in seconds.
    pub interval_secs: f64,
    /// When the measured phase began, in milliseconds since the Unix epoch (to line the
    /// intervals up with other observations of the run).
    pub start_unix_ms: u64,
    /// The intervals, in order, up to the end of the run.
    pub points: Vec<TimelinePoint>,
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Protocol spoken.
    pub protocol: Protocol,
    /// Operation mix.
    pub workload: Workload,
    /// Key distribution.
    pub distribution: Distribution,
    /// Zipf exponent (0 for the uniform distribution).
    pub zipf_theta: f64,
    /// Distinct keys.
    pub keys: u64,
    /// Value size in bytes.
    pub value_size: usize,
    /// Connections.
    pub connections: usize,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Operations per request (native `GetMany`/`PutMany`; 1 otherwise).
    pub batch: usize,
    /// Load-generator threads.
    pub threads: usize,
    /// Length of the measured window, in seconds.
    pub duration_secs: f64,
    /// Operations completed in the measured window.
    pub ops: u64,
    /// `ops / duration_secs`.
    pub ops_per_sec: f64,
    /// Measured operations that got an error reply.
    pub errors: u64,
    /// Operations sent again while measuring, by cause (`--follow-topology`; all zero
    /// without it).
    pub resends: Resends,
    /// Per-operation latency (a read-modify-write counts both round trips).
    pub latency_us: Latency,
    /// The load phase, if there was one.
    pub load: Option<LoadReport>,
    /// Per-interval throughput and latency, with `--timeline` (absent from the JSON
    /// otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

fn name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

impl Report {
    /// The report as one JSON object (one line).
    pub fn to_json(&self) -> String {
        // Serialising plain numbers, strings and options cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Prints a compact human-readable table.
    ///
    /// # Errors
    /// Errors writing to `out`.
    pub fn print_table(&self, out: &mut impl Write) -> io::Result<()> {
        let dist = match self.distribution {
            Distribution::Uniform => "uniform".to_string(),
            Distribution::Zipf => format!("zipf θ={}", self.zipf_theta),
        };
        writeln!(
            out,
            "{} workload {}  keys {}  value {} B  {}",
            name(&self.protocol),
            name(&self.workload),
            group_digits(self.keys),
            self.value_size,
            dist
        )?;
        writeln!(
            out,
            "connections {}  pipeline {}  batch {}  threads {}",
            self.connections, self.pipeline, self.batch, self.threads
        )?;
        if let Some(l) = &self.load {
            writeln!(
                out,
                "load        {} keys in {:.2} s = {} ops/s",
                group_digits(l.keys),
                l.secs,
                group_digits(l.ops_per_sec.round() as u64)
            )?;
        }
        writeln!(
            out,
            "throughput  {} ops/s  ({} ops in {:.2} s, {} errors)",
            group_digits(self.ops_per_sec.round() as u64),
            group_digits(self.ops),
            self.duration_secs,
            self.errors
        )?;
        let r = &self.resends;
        if r.total() > 0 {
            writeln!(
                out,
                "resent      {} ops: {} redirected, {} unreachable, {} lost, {} unanswered",
                group_digits(r.total()),
                group_digits(r.redirected),
                group_digits(r.unreachable),
                group_digits(r.lost),
                group_digits(r.silent)
            )?;
        }
        let l = &self.latency_us;
        writeln!(
            out,
            "latency µs  p50 {:.0}  p99 {:.0}  p99.9 {:.0}  max {:.0}  mean {:.1}",
            l.p50, l.p99, l.p999, l.max, l.mean
        )?;
        if let Some(t) = &self.timeline {
            writeln!(
                out,
                "timeline    {:>8} {:>11} {:>8} {:>8} {:>8} {:>6} {:>6}",
                "s", "ops/s", "mean µs", "p50", "p99", "errors", "resent"
            )?;
            for p in &t.points {
                writeln!(
                    out,
                    "            {:>8.2} {:>11} {:>8.0} {:>8.0} {:>8.0} {:>6} {:>6}",
                    p.end_secs,
                    group_digits(p.ops_per_sec.round() as u64),
                    p.latency_us.mean,
                    p.latency_us.p50,
                    p.latency_us.p99,
                    p.errors,
                    p.resent
                )?;
            }
        }
        Ok(())
    }

    /// Prints the report as JSON (`json`) or as the table.
    ///
    /// # Errors
    /// Errors writing to `out`.
    pub fn print(&self, out: &mut impl Write, json: bool) -> io::Result<()> {
        if json {
            writeln!(out, "{}", self.to_json())
        } else {
            self.print_table(out)
        }
    }
}

/// `1234567` → `1,234,567`.
pub(crate) fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_digits_commas() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(1_234_567), "1,234,567");
    }

    fn sample() -> Report {
        Report {
            protocol: Protocol::Resp,
            workload: Workload::A,
            distribution: Distribution::Zipf,
            zipf_theta: 0.99,
            keys: 100_000,
            value_size: 100,
            connections: 50,
            pipeline: 16,
            batch: 1,
            threads: 1,
            duration_secs: 10.0,
            ops: 9_000_000,
            ops_per_sec: 900_000.0,
            errors: 0,
            resends: Resends {
                redirected: 3,
                ..Resends::default()
            },
            latency_us: Latency {
                p50: 700.0,
                p99: 1200.0,
                p999: 2000.0,
                max: 5000.0,
                mean: 710.5,
            },
            load: Some(LoadReport {
                keys: 100_000,
                secs: 0.5,
                ops_per_sec: 200_000.0,
            }),
            timeline: None,
        }
    }

    #[test]
    fn json_field_names() {
        let v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "batch",
                "connections",
                "distribution",
                "duration_secs",
                "errors",
                "keys",
                "latency_us",
                "load",
                "ops",
                "ops_per_sec",
                "pipeline",
                "protocol",
                "resends",
                "threads",
                "value_size",
                "workload",
                "zipf_theta"
            ]
        );
        assert_eq!(v["protocol"], "resp");
        assert_eq!(v["workload"], "a");
        assert_eq!(v["distribution"], "zipf");
        assert_eq!(v["latency_us"]["p999"], 2000.0);
        assert_eq!(v["load"]["ops_per_sec"], 200_000.0);
        let none = Report {
            load: None,
            ..sample()
        };
        let v: serde_json::Value = serde_json::from_str(&none.to_json()).unwrap();
        assert!(v["load"].is_null());
        let with = Report {
            timeline: Some(Timeline {
                interval_secs: 0.5,
                start_unix_ms: 1_700_000_000_000,
                points: vec![TimelinePoint {
                    end_secs: 0.5,
                    ops: 100,
                    ops_per_sec: 200.0,
                    errors: 0,
                    resent: 4,
                    latency_us: Latency {
                        mean: 12.5,
                        ..Latency::default()
                    },
                }],
            }),
            ..sample()
        };
        let v: serde_json::Value = serde_json::from_str(&with.to_json()).unwrap();
        assert_eq!(v["timeline"]["interval_secs"], 0.5);
        assert_eq!(v["timeline"]["points"][0]["ops_per_sec"], 200.0);
        assert_eq!(v["timeline"]["points"][0]["latency_us"]["mean"], 12.5);
        assert_eq!(v["timeline"]["points"][0]["resent"], 4);
        assert_eq!(v["resends"]["redirected"], 3);
        assert_eq!(v["resends"]["silent"], 0);
        let mut out = Vec::new();
        with.print_table(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("timeline"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.contains(" 0.50 ") && l.contains(" 200 ")),
            "{text}"
        );
    }

    #[test]
    fn table() {
        let mut out = Vec::new();
        sample().print_table(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("resp workload a"), "{text}");
        assert!(text.contains("900,000 ops/s"), "{text}");
        assert!(text.contains("p99 1200"), "{text}");
        assert!(text.contains("load        100,000 keys"), "{text}");
    }
}
