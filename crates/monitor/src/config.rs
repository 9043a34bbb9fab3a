//! The policy's parameters: [`PolicyConfig`], with the elastic Anna paper's defaults.
//!
//! Every field has a default and a reason (the paper's Table 2, its reference code, or a
//! choice of ours, said so); `docs/elasticity.md` lists them all. A configuration is read
//! from TOML (`#[serde(default, deny_unknown_fields)]`: a missing key takes its default, an
//! unknown key is an error) and checked with [`PolicyConfig::validate`].

use serde::{Deserialize, Serialize};

/// A band `[lower, upper]` of a measured fraction: below `lower` the policy shrinks, above
/// `upper` it grows, in between it leaves things alone (the hysteresis that keeps it from
/// oscillating).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Band {
    /// Lower threshold.
    pub lower: f64,
    /// Upper threshold.
    pub upper: f64,
}

impl Band {
    /// `[lower, upper]`.
    pub const fn new(lower: f64, upper: f64) -> Band {
        Band { lower, upper }
    }
}

/// How the occupancies of a tier's nodes are folded into the one number `compute(M)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// The least occupied node.
    Min,
    /// The mean over nodes.
    Mean,
    /// The most occupied node.
    Max,
}

/// Prices in dollars per hour, for the budget mode (Algorithm 3's `Cost_target`).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Prices {
    /// One memory-tier node. Default 0.532: the paper's r4.2xlarge on demand in us-east-1
    /// (12 nodes = the $6.384/h of its Fig. 3.4).
    pub memory_node: f64,
    /// One disk-tier node. Default 0.133: the paper's r4.large on demand at the time (its
    /// EBS volumes' price is not given).
    pub disk_node: f64,
    /// What the cluster costs whatever its storage nodes: routing and monitoring. Default
    /// 0.30: the paper's 3 × m4.large, "included in all cost numbers".
    pub fixed: f64,
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            memory_node: 0.532,
            disk_node: 0.133,
            fixed: 0.30,
        }
    }
}

/// Parameters of the policy engine.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// How often the monitor runs a round, in ms (the paper's T; used by the monitor's loop,
    /// not by `decide`). Default 5,000. The paper's 30 s (\[P\] Table 2; the thesis says 15 s)
    /// paced statistics reported every 15 s over 60 s windows; our nodes publish a sliding
    /// 10 s window every second (`[stats]`), so a round every 5 s sees a hot key within
    /// seconds of it getting hot — the paper's "promoted within ~10 s" — and costs one status
    /// request per node.
    pub period_ms: u64,
    /// Grace period after a resource change (nodes requested, removed, joined, left or
    /// died), in ms: no demotion, hot-key replication, de-replication or elasticity until it
    /// ends; promotion is allowed. Default 90,000 (reference code 120,000). The timer also
    /// restarts when a requested node appears in the membership, so node start-up time need
    /// not be covered (the paper's nodes took 5 minutes, ours seconds): what must be covered
    /// is hand-off (about 7 s per million keys, docs/benchmarks.md) plus one 60 s statistics
    /// window, so the first round after the grace judges a window that started after the
    /// layout settled: 60 s + one period.
    pub grace_ms: u64,
    /// A key whose vector the policy changed is left alone for this long, in ms, except to
    /// keep its factors within the node counts. Default 10,000: one statistics window of
    /// the nodes (`[stats] window_ms`), so the next change is judged on accesses and latency
    /// measured under the new vector (the
    /// paper changes a key at most once per round; without this, a round run on statistics
    /// that predate the last change would repeat it).
    pub key_cooldown_ms: u64,
    /// Requested nodes that have not joined after this long, in ms, are forgotten and may be
    /// requested again; until then they count as present so a request is not repeated every
    /// round. Default 600,000: twice the paper's 5-minute Kubernetes start-up.
    pub pending_timeout_ms: u64,
    /// k: every key keeps at least k + 1 replicas across the tiers that have nodes. Default 1:
    /// our default cluster is one memory and one disk node with the default vector
    /// (memory 1, disk 1): two copies on two nodes, which survives one failure. The paper's
    /// k = 2 would need three disk nodes in the cheapest configuration.
    pub fault_tolerance: u32,
    /// L_obj, the average latency objective in µs (latency mode: minimise cost while meeting
    /// it). Unset: the latency mode with `unsaturated_latency_us`. Exclusive with
    /// `budget_per_hour` (the paper: administrators specify one of the two).
    pub latency_objective_us: Option<u64>,
    /// B, the cost budget in dollars per hour (budget mode: best latency without spending more
    /// than B). Unset: latency mode. Default unset.
    pub budget_per_hour: Option<f64>,
    /// The latency the budget mode aims for and the latency mode's default objective, in µs.
    /// Default 1,000. The paper's 2.5 ms was Anna's unsaturated latency as its clients saw it
    /// (T-L1030), network included. Ours is measured at the servers and corrected for
    /// queueing (`collect`): an unsaturated worker answers in 10–50 µs, so 1 ms — 0.75 ms at
    /// f_upper — is reached only when a worker's queue holds tens of requests, i.e. when it
    /// is saturated. See docs/elasticity.md.
    pub unsaturated_latency_us: u64,
    /// Node prices, for the budget mode.
    pub prices: Prices,
    /// s: a key is hot when its accesses exceed mean + s·σ of the accessed keys' counts.
    /// Default 3: the paper's H (the reference code uses 1).
    pub hot_sigmas: f64,
    /// P: a key without a memory replica is promoted when accessed more than P times in the
    /// window. Default 2: the paper's "2 accesses" (the reference code: more than 0).
    pub promotion_threshold: u64,
    /// D: a key with an explicit vector and memory replicas is demoted to the disk tier when
    /// accessed fewer than D times in the window. Default 1 (not in the paper's tables; the
    /// reference code's value): only keys nobody read or wrote during a whole window. Must
    /// not exceed P (else a key could be promoted and demoted in turn).
    pub demotion_threshold: u64,
    /// [S_lower, S_upper] of the memory tier's storage use (bytes / capacity). Default
    /// [0.3, 0.6]: the paper's Table 2. Only `upper` acts: the memory tier is never shrunk for
    /// storage (the paper: hot-key replication raises compute without raising storage).
    pub memory_storage: Band,
    /// [S_lower, S_upper] of the disk tier's storage use. Default [0.5, 0.75]: Table 2.
    pub disk_storage: Band,
    /// [f_lower, f_upper], fractions of L_obj: above `upper` the memory tier is short of
    /// capacity (add nodes or replicate hot keys), below `lower` it may shrink. Default
    /// [0.5, 0.75]: Table 2.
    pub latency_band: Band,
    /// [C_lower, C_upper] of memory-node occupancy (busy time / window). Default
    /// [0.05, 0.20]: Table 2 (the paper found 20 % optimal on its hardware: the NIC saturated
    /// long before the CPU; the reference code adds at 0.15).
    pub compute_band: Band,
    /// c: compute-driven addition grows the memory tier to at most N_M · c. Default 1.5:
    /// Table 2.
    pub max_latency_ratio: f64,
    /// Most nodes one round adds to a tier. Default 8 (the reference code always adds 2, the
    /// paper as many as its formula says): one window's statistics decide the request, so
    /// the cap bounds what a wrong statistic or a short spike can cost (the paper's
    /// adversary, §3.7) and how much data moves at once; the next round after the grace
    /// adds more if still needed.
    pub node_addition_batch: u32,
    /// The memory tier is never shrunk below this. Default 1: the memory tier holds the
    /// metadata (the paper's minimum).
    pub min_memory_nodes: u32,
    /// The disk tier, when it exists, is never shrunk below max(this, k + 1). Default 0 (so
    /// k + 1, the paper's minimum: "to meet the k-fault SLO when all data is demoted").
    pub min_disk_nodes: u32,
    /// compute(M) for adding memory nodes. Default `min`, the reference code's: add only
    /// when every node is busy; when some are free the latency comes from skew and hot-key
    /// replication onto the free nodes is the remedy (the paper's saturation argument).
    pub add_occupancy: Aggregate,
    /// compute(M) for removing a memory node. Default `max` (the reference code uses the
    /// min): remove only when every node is idle. After a removal the busiest node carries
    /// at most N/(N−1) ≤ 2 times C_lower, below C_upper, so the removal cannot trigger an
    /// addition (the min would remove one idle node next to saturated ones).
    pub remove_occupancy: Aggregate,
    /// A latency mean over fewer requests than this is not trusted: the round acts as if no
    /// latency was measured (no latency-driven addition or replication). Default 100.
    pub min_latency_samples: u64,
    /// Most key changes (set or reset vectors) one round emits, the hottest keys first.
    /// Default 1024 (the paper promoted a hot set of "a few thousand keys" within about ten
    /// seconds; each change is a metadata write gossiped to every node).
    pub max_key_changes_per_round: u32,
    /// How many recently changed keys the state remembers for `key_cooldown_ms`; the oldest
    /// is forgotten first. Default 8192 (eight rounds at the per-round maximum).
    pub recent_keys_capacity: u32,
}

impl PolicyConfig {
    /// The defaults with the paper's timings and objective instead of ours: a 30 s round,
    /// a 60 s per-key cooldown (its statistics window) and a 2.5 ms latency objective. The
    /// rule tables and simulations of this crate's tests are written against these.
    pub fn paper() -> PolicyConfig {
        PolicyConfig {
            period_ms: 30_000,
            key_cooldown_ms: 60_000,
            unsaturated_latency_us: 2_500,
            ..PolicyConfig::default()
        }
    }
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            period_ms: 5_000,
            grace_ms: 90_000,
            key_cooldown_ms: 10_000,
            pending_timeout_ms: 600_000,
            fault_tolerance: 1,
            latency_objective_us: None,
            budget_per_hour: None,
            unsaturated_latency_us: 1_000,
            prices: Prices::default(),
            hot_sigmas: 3.0,
            promotion_threshold: 2,
            demotion_threshold: 1,
            memory_storage: Band::new(0.3, 0.6),
            disk_storage: Band::new(0.5, 0.75),
            latency_band: Band::new(0.5, 0.75),
            compute_band: Band::new(0.05, 0.20),
            max_latency_ratio: 1.5,
            node_addition_batch: 8,
            min_memory_nodes: 1,
            min_disk_nodes: 0,
            add_occupancy: Aggregate::Min,
            remove_occupancy: Aggregate::Max,
            min_latency_samples: 100,
            max_key_changes_per_round: 1024,
            recent_keys_capacity: 8192,
        }
    }
}

/// A configuration that makes no sense.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A band's thresholds are not finite, not `0 ≤ lower < upper`, or (for fractions of a
    /// capacity) above 1.
    #[error("{name}: need 0 <= lower < upper{}, got [{lower}, {upper}]", if *.fraction { " <= 1" } else { "" })]
    Band {
        /// Which band.
        name: &'static str,
        /// Its lower threshold.
        lower: f64,
        /// Its upper threshold.
        upper: f64,
        /// Whether the band is a fraction of a capacity (upper ≤ 1).
        fraction: bool,
    },
    /// A price or the budget is negative or not a number.
    #[error("{name} must be a finite number >= 0, got {value}")]
    Negative {
        /// Which value.
        name: &'static str,
        /// The value.
        value: f64,
    },
    /// Both objectives were given.
    #[error("give latency_objective_us or budget_per_hour, not both")]
    BothObjectives,
    /// The budget cannot pay for the smallest cluster the policy keeps.
    #[error("budget_per_hour {budget} is below the fixed cost plus min_memory_nodes memory nodes ({minimum})")]
    BudgetBelowMinimum {
        /// The budget.
        budget: f64,
        /// The cheapest cluster.
        minimum: f64,
    },
    /// A value that must be positive is zero (or, for `c` and `s`, out of range).
    #[error("{name} is out of range: {reason}")]
    OutOfRange {
        /// Which value.
        name: &'static str,
        /// What is required.
        reason: &'static str,
    },
}

impl PolicyConfig {
    /// Whether the budget mode is on.
    pub fn budget_mode(&self) -> bool {
        self.budget_per_hour.is_some()
    }

    /// L_obj in µs: the latency objective, or the unsaturated latency in budget mode.
    pub fn latency_objective(&self) -> u64 {
        self.latency_objective_us
            .unwrap_or(self.unsaturated_latency_us)
    }

    /// Checks the configuration; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bands = [
            ("memory_storage", self.memory_storage, true),
            ("disk_storage", self.disk_storage, true),
            ("latency_band", self.latency_band, false),
            ("compute_band", self.compute_band, true),
        ];
        for (name, band, fraction) in bands {
            let ok = band.lower.is_finite()
                && band.upper.is_finite()
                && band.lower >= 0.0
                && band.lower < band.upper
                && (!fraction || band.upper <= 1.0);
            if !ok {
                return Err(ConfigError::Band {
                    name,
                    lower: band.lower,
                    upper: band.upper,
                    fraction,
                });
            }
        }
        let money = [
            ("prices.memory_node", Some(self.prices.memory_node)),
            ("prices.disk_node", Some(self.prices.disk_node)),
            ("prices.fixed", Some(self.prices.fixed)),
            ("budget_per_hour", self.budget_per_hour),
        ];
        for (name, value) in money {
            if let Some(value) = value {
                if !value.is_finite() || value < 0.0 {
                    return Err(ConfigError::Negative { name, value });
                }
            }
        }
        if self.latency_objective_us.is_some() && self.budget_per_hour.is_some() {
            return Err(ConfigError::BothObjectives);
        }
        if let Some(budget) = self.budget_per_hour {
            let minimum =
                self.prices.fixed + f64::from(self.min_memory_nodes) * self.prices.memory_node;
            if budget < minimum {
                return Err(ConfigError::BudgetBelowMinimum { budget, minimum });
            }
        }
        let checks: [(&'static str, bool, &'static str); 10] = [
            ("period_ms", self.period_ms > 0, "must be > 0"),
            (
                "latency objective",
                self.latency_objective() > 0,
                "latency_objective_us and unsaturated_latency_us must be > 0",
            ),
            (
                "hot_sigmas",
                self.hot_sigmas.is_finite() && self.hot_sigmas >= 0.0,
                "must be a finite number >= 0",
            ),
            (
                "max_latency_ratio",
                self.max_latency_ratio.is_finite() && self.max_latency_ratio >= 1.0,
                "c must be a finite number >= 1 (below 1 compute-driven addition never adds)",
            ),
            (
                "demotion_threshold",
                self.demotion_threshold <= self.promotion_threshold,
                "D must not exceed P (a key could be promoted and demoted in turn)",
            ),
            ("node_addition_batch", self.node_addition_batch > 0, "must be > 0"),
            (
                "min_memory_nodes",
                self.min_memory_nodes > 0,
                "must be > 0 (the memory tier holds the metadata)",
            ),
            ("min_latency_samples", self.min_latency_samples > 0, "must be > 0"),
            (
                "max_key_changes_per_round",
                self.max_key_changes_per_round > 0,
                "must be > 0",
            ),
            (
                "recent_keys_capacity",
                self.recent_keys_capacity >= self.max_key_changes_per_round,
                "must be >= max_key_changes_per_round (else one round's changes lose their cooldown)",
            ),
        ];
        for (name, ok, reason) in checks {
            if !ok {
                return Err(ConfigError::OutOfRange { name, reason });
            }
        }
        Ok(())
    }
}
