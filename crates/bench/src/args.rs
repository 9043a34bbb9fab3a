//! The benchmark's flags ([`BenchArgs`]) and their validation.

use clap::{Parser, ValueEnum};
use serde::Serialize;

use crate::error::BenchError;

/// Most intervals a timeline keeps; rounds completed later count only in the totals.
pub const MAX_INTERVALS: usize = 100_000;

/// Which protocol the load generator speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// The Redis protocol (RESP2), against latticekv's RESP port or any Redis server.
    Resp,
    /// latticekv's native protobuf protocol, straight to the worker owning each key.
    Native,
    /// The Rust client's sessions at `--level` (each connection is one session doing one
    /// operation at a time; `--pipeline` is ignored): the cost of a consistency level.
    Session,
}

impl Protocol {
    /// The default server address for this protocol.
    pub fn default_addr(self) -> &'static str {
        match self {
            Protocol::Resp => "127.0.0.1:6380",
            Protocol::Native | Protocol::Session => "127.0.0.1:7700",
        }
    }
}

/// The operation mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// YCSB A: 50% reads, 50% updates.
    A,
    /// YCSB B: 95% reads, 5% updates.
    B,
    /// YCSB C: 100% reads.
    C,
    /// 100% updates.
    Update,
    /// YCSB F: 50% reads, 50% read-modify-writes (a read then a write of the same key,
    /// counted as one operation whose latency is the sum of both round trips).
    Rmw,
    /// redis-benchmark-style `SET` only (same mix as `update`).
    Set,
    /// redis-benchmark-style `GET` only (same mix as `c`).
    Get,
}

/// How keys are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// Zipfian over key ranks (exponent `--zipf-theta`), ranks scrambled over the key space.
    Zipf,
}

/// The lattice type written (and read) by the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteType {
    /// LWW register: RESP `SET k v` / `GET k`; native `Update{assign}` / `Get`.
    Lww,
    /// PN-counter: RESP `INCRBY k 1` / `GET k`; native `Update{counter_add}` / `Get`.
    Counter,
    /// OR-set: RESP `SADD k m` / `SISMEMBER k m`; native `Update{set_add}` / `Get`.
    Orset,
}

/// Flags of `latticekv bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Protocol to speak.
    #[arg(long, value_enum, default_value_t = Protocol::Resp)]
    pub protocol: Protocol,

    /// Server address (default 127.0.0.1:6380 for resp, the node's front port
    /// 127.0.0.1:7700 for native).
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: Option<String>,

    /// Operation mix: YCSB a (50/50 read/update), b (95/5), c (reads), update (writes),
    /// rmw (YCSB F), or set / get.
    #[arg(long, value_enum, default_value_t = Workload::A)]
    pub workload: Workload,

    /// Number of distinct keys.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,

    /// Key length in bytes (`key:` + zero-padded decimal id).
    #[arg(long, default_value_t = 16)]
    pub key_size: usize,

    /// Value length in bytes (LWW writes).
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,

    /// Key distribution.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    pub distribution: Distribution,

    /// Zipf exponent θ (≥ 0; 0 is uniform, 0.99 is YCSB's default).
    #[arg(long, default_value_t = 0.99)]
    pub zipf_theta: f64,

    /// Concurrent connections.
    #[arg(long, default_value_t = 50)]
    pub connections: usize,

    /// Requests in flight per connection: each round writes this many, then reads their
    /// replies.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,

    /// Load-generator threads, each a single-threaded runtime owning connections/threads
    /// connections.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,

    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub duration: f64,

    /// Stop after this many measured operations instead of after --duration.
    #[arg(long, value_name = "N")]
    pub ops: Option<u64>,

    /// Seconds of load before measuring (not measured).
    #[arg(long, default_value_t = 2.0, value_name = "SECS")]
    pub warmup: f64,

    /// Lattice type written and read.
    #[arg(long = "type", value_enum, default_value_t = WriteType::Lww)]
    pub write_type: WriteType,

    /// Before measuring, write keys 0..N with pipelined writes (no value: all --keys).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "all")]
    pub load: Option<LoadKeys>,

    /// Native only: operations per GetMany/PutMany request (1: one Get/Update per op). A
    /// round then carries pipeline × batch operations, split per worker and per read/write
    /// into requests of at most `batch` operations.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,

    /// Session protocol: the consistency level of every session (`eventual`,
    /// `read-your-writes`, `monotonic-reads`, `monotonic-writes`, `writes-follow-reads`,
    /// `pram`, `causal`, `multi-key-causal`, `read-uncommitted`, `read-committed`,
    /// `item-cut`; writes on the transactional levels are single-write transactions).
    #[arg(long, default_value = "eventual")]
    pub level: String,

    /// Seed of every random choice (keys, operation mix, values).
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,

    /// Also report throughput and latency per interval of this many seconds of the measured
    /// phase (a round counts in the interval it completed in), to follow a run that changes
    /// while it goes: nodes added or removed, keys replicated.
    #[arg(long, value_name = "SECS")]
    pub timeline: Option<f64>,

    /// Open loop: send this many operations per second in all, spread evenly over the
    /// connections, each sending a round (`--pipeline` × `--batch` operations) when it is
    /// due and measuring its latency from then (a round due while the previous one is
    /// still out starts late, and that delay counts, less any part of it the client's own
    /// timer caused). On Linux the rounds are timed with a timerfd, not tokio's 1 ms timer.
    /// Without it each connection sends its next round as soon as the last one is
    /// answered (closed loop).
    #[arg(long, value_name = "OPS")]
    pub rate: Option<f64>,

    /// Native only: follow a cluster that changes during the run (nodes added or removed,
    /// keys replicated): the key placement is fetched again every second and as soon as a
    /// request is redirected or a worker's connection is lost, and such operations are sent
    /// again with the new placement (up to 8 times; a lost write only if sending it twice is
    /// harmless), their latency counting from the first send; a worker that has not
    /// answered a round within a second counts as a lost connection. Without it a redirect
    /// is an error, and a lost connection ends the run.
    #[arg(long)]
    pub follow_topology: bool,

    /// Print the report as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,

    /// No progress line on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// The value of `--load`: a key count, or `all` (every `--keys` key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadKeys {
    /// All `--keys` keys.
    All,
    /// Keys `0..n`.
    Count(u64),
}

impl std::str::FromStr for LoadKeys {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("all") {
            return Ok(LoadKeys::All);
        }
        s.parse::<u64>()
            .map(LoadKeys::Count)
            .map_err(|_| format!("expected a key count or `all`, got `{s}`"))
    }
}

/// Wrapper to parse [`BenchArgs`] on their own (defaults, tests).
#[derive(Parser, Debug)]
#[command(name = "bench")]
struct Standalone {
    #[command(flatten)]
    args: BenchArgs,
}

impl BenchArgs {
    /// Parses flags as the `bench` subcommand would (`argv[0]` is ignored).
    ///
    /// # Errors
    /// clap's error for unknown or malformed flags.
    pub fn try_parse_from<I, T>(argv: I) -> Result<BenchArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        Standalone::try_parse_from(argv).map(|s| s.args)
    }

    /// The server address: `--addr`, else the protocol's default.
    pub fn address(&self) -> String {
        self.addr
            .clone()
            .unwrap_or_else(|| self.protocol.default_addr().to_string())
    }

    /// Keys the load phase writes (0 = no load phase).
    pub fn load_keys(&self) -> u64 {
        match self.load {
            None => 0,
            Some(LoadKeys::All) => self.keys,
            Some(LoadKeys::Count(n)) => n,
        }
    }

    /// Checks the flags; the error says which one is wrong.
    ///
    /// # Errors
    /// [`BenchError::Config`].
    pub fn validate(&self) -> Result<(), BenchError> {
        let fail = |msg: String| Err(BenchError::Config(msg));
        if self.keys == 0 || self.keys > u64::from(u32::MAX) {
            return fail(format!("--keys must be in 1..={}", u32::MAX));
        }
        if self.key_size == 0 || self.key_size > 64 * 1024 {
            return fail("--key-size must be in 1..=65536".into());
        }
        let digits = crate::keys::digits(self.keys - 1);
        if self.key_size < digits {
            return fail(format!(
                "--key-size {} cannot hold {} distinct keys (needs at least {digits} bytes)",
                self.key_size, self.keys
            ));
        }
        if self.value_size > 64 * 1024 * 1024 {
            return fail("--value-size must be at most 64 MiB".into());
        }
        if !(self.zipf_theta.is_finite() && self.zipf_theta >= 0.0 && self.zipf_theta <= 100.0) {
            return fail("--zipf-theta must be in 0..=100".into());
        }
        if self.connections == 0 || self.connections > 100_000 {
            return fail("--connections must be in 1..=100000".into());
        }
        if self.pipeline == 0 || self.pipeline > 1_000_000 {
            return fail("--pipeline must be in 1..=1000000".into());
        }
        if self.threads == 0 || self.threads > self.connections {
            return fail("--threads must be at least 1 and at most --connections".into());
        }
        if self.batch == 0 || self.batch > 1_000_000 {
            return fail("--batch must be in 1..=1000000".into());
        }
        if client::Level::from_name(&self.level).is_none() {
            return fail(format!("unknown --level {}", self.level));
        }
        if self.protocol == Protocol::Session && self.write_type != WriteType::Lww {
            return fail("--protocol session writes registers: use --write-type lww".into());
        }
        if self.batch > 1 && self.protocol != Protocol::Native {
            return fail("--batch needs --protocol native".into());
        }
        if self.follow_topology && self.protocol != Protocol::Native {
            return fail(
                "--follow-topology needs --protocol native (the session protocol's client follows redirects itself)"
                    .into(),
            );
        }
        if !(self.duration.is_finite() && self.duration > 0.0 && self.duration < 1e7) {
            return fail("--duration must be a positive number of seconds".into());
        }
        if !(self.warmup.is_finite() && self.warmup >= 0.0 && self.warmup < 1e7) {
            return fail("--warmup must be a non-negative number of seconds".into());
        }
        if self.ops == Some(0) {
            return fail("--ops must be at least 1".into());
        }
        if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0) {
                return fail("--rate must be a positive number of operations per second".into());
            }
        }
        if let Some(t) = self.timeline {
            if !(t.is_finite() && t >= 0.001) {
                return fail("--timeline must be at least 0.001 seconds".into());
            }
            if self.ops.is_none() && self.duration / t > MAX_INTERVALS as f64 {
                return fail(format!(
                    "--timeline {t} cuts --duration {} into more than {} intervals",
                    self.duration, MAX_INTERVALS
                ));
            }
        }
        if self.load_keys() > self.keys {
            return fail(format!(
                "--load {} is more than --keys {}",
                self.load_keys(),
                self.keys
            ));
        }
        Ok(())
    }
}

impl Default for BenchArgs {
    /// The defaults of every flag.
    fn default() -> Self {
        // Parsing no flags cannot fail: every field has a default.
        BenchArgs::try_parse_from(["bench"]).unwrap_or_else(|e| panic!("bench defaults: {e}"))
    }
}

/// A short configuration (about 2 seconds, small key space, a load phase) for CI smoke runs
/// against a server at `addr`.
pub fn smoke_args(addr: &str, protocol: Protocol) -> BenchArgs {
    BenchArgs {
        protocol,
        addr: Some(addr.to_string()),
        workload: Workload::A,
        keys: 1000,
        connections: 4,
        pipeline: 4,
        duration: 1.5,
        warmup: 0.5,
        load: Some(LoadKeys::All),
        quiet: true,
        ..BenchArgs::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_flags() {
        let d = BenchArgs::default();
        assert_eq!(d.protocol, Protocol::Resp);
        assert_eq!(d.address(), "127.0.0.1:6380");
        assert_eq!((d.keys, d.key_size, d.value_size), (100_000, 16, 100));
        assert_eq!(
            (d.connections, d.pipeline, d.threads, d.batch),
            (50, 1, 1, 1)
        );
        assert_eq!(d.load_keys(), 0);
        assert!(d.validate().is_ok());

        let a = BenchArgs::try_parse_from(["bench", "--protocol", "native", "--load"]).unwrap();
        assert_eq!(a.address(), "127.0.0.1:7700");
        assert_eq!(a.load_keys(), 100_000);
        let a = BenchArgs::try_parse_from(["bench", "--load", "500", "--type", "orset"]).unwrap();
        assert_eq!(a.load_keys(), 500);
        assert_eq!(a.write_type, WriteType::Orset);
        let a = BenchArgs::try_parse_from(["bench", "--load", "--json", "--workload", "rmw"]);
        let a = a.unwrap();
        assert_eq!(
            (a.load_keys(), a.json, a.workload),
            (100_000, true, Workload::Rmw)
        );
    }

    #[test]
    fn validation() {
        let bad = |argv: &[&str]| {
            let mut all = vec!["bench"];
            all.extend_from_slice(argv);
            BenchArgs::try_parse_from(all).unwrap().validate().is_err()
        };
        assert!(bad(&["--batch", "4"]));
        assert!(!bad(&["--batch", "4", "--protocol", "native"]));
        assert!(bad(&["--keys", "1000", "--key-size", "2"]));
        assert!(!bad(&["--keys", "1000", "--key-size", "3"]));
        assert!(bad(&["--threads", "3", "--connections", "2"]));
        assert!(bad(&["--load", "200", "--keys", "100"]));
        assert!(bad(&["--zipf-theta=-1"]));
        assert!(bad(&["--duration", "0"]));
        assert!(bad(&["--rate", "0"]));
        assert!(bad(&["--rate=-5"]));
        assert!(!bad(&["--rate", "2500.5"]));
        assert!(BenchArgs::default().rate.is_none());
        assert!(bad(&["--follow-topology"]));
        assert!(!bad(&["--follow-topology", "--protocol", "native"]));
        assert!(bad(&["--timeline", "0"]));
        assert!(bad(&["--timeline", "0.001", "--duration", "1000"]));
        assert!(!bad(&["--timeline", "0.5", "--duration", "60"]));
        assert!(!bad(&["--timeline", "0.001", "--ops", "10"]));
        assert!(smoke_args("127.0.0.1:1", Protocol::Native)
            .validate()
            .is_ok());
    }
}
