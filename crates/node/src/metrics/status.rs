//! The status page's data (`GET /status.json` on the HTTP port): the node, the cluster as
//! it sees it, its workers' load and latency, what it stores and its hot keys, as JSON built
//! from a snapshot without I/O (the page itself is [`PAGE`], which polls it every second).
//!
//! Unlike `/metrics`, this names keys: the hot keys. The HTTP port takes no credentials,
//! so a node whose client ports require authentication leaves the key names out (the
//! counts stay); see docs/operations.md.

use serde::Serialize;
use wire::pb;

use crate::driver::worker::WorkerStats;
use crate::stats::latency::{Cumulative, Histogram};
use crate::stats::HotKey;

/// The status page: one self-contained HTML file (inline CSS and JS, no external assets).
pub const PAGE: &str = include_str!("status.html");

/// Most hot keys listed (the node's hottest, all workers together).
pub const MAX_HOT_KEYS: usize = 10;
/// Longest key shown, bytes (longer ones are cut and end in `…`).
const MAX_KEY_SHOWN: usize = 64;

/// What the status is built from.
pub struct StatusSnapshot<'a> {
    /// The node's id.
    pub node_id: &'a str,
    /// Its tier (`memory`, `disk`).
    pub tier: &'a str,
    /// Milliseconds since it started.
    pub uptime_ms: u64,
    /// Its memory budget, bytes.
    pub memory_budget_bytes: u64,
    /// Every worker's statistics.
    pub workers: &'a [WorkerStats],
    /// Every member of the cluster this node knows, itself included.
    pub members: &'a [pb::Member],
    /// Whether hot keys may be named (false when the client ports require authentication).
    pub show_keys: bool,
}

/// `/status.json`. Field meanings are documented in docs/operations.md.
#[derive(Debug, Serialize)]
pub struct Status {
    /// The node's version.
    pub version: &'static str,
    /// The node's id.
    pub node: String,
    /// The node's tier.
    pub tier: String,
    /// Milliseconds since the node started (also the clock the page computes rates with).
    pub uptime_ms: u64,
    /// The cluster's members as this node sees them, by id.
    pub members: Vec<MemberStatus>,
    /// Per-worker figures, by worker index.
    pub workers: Vec<WorkerStatus>,
    /// Operations executed since start, all workers.
    pub operations: u64,
    /// Latency of client requests over the last statistics window, all workers.
    pub latency: Latency,
    /// Latency of client requests since start, all workers.
    pub latency_since_start: Latency,
    /// What the node stores.
    pub storage: Storage,
    /// The node's hottest keys over the last statistics window.
    pub hot_keys: Vec<HotKeyStatus>,
    /// False when key names are withheld (`hot_keys[].key` is then null).
    pub hot_key_names: bool,
}

/// A member of the cluster.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct MemberStatus {
    /// Its node id.
    pub id: String,
    /// `memory`, `disk` or `routing`.
    pub tier: String,
    /// `alive`, `suspect`, `dead` or `left`.
    pub health: &'static str,
    /// True for the node answering.
    #[serde(rename = "self")]
    pub is_self: bool,
    /// Its client (native protocol) address.
    pub front: String,
    /// Its RESP address.
    pub resp: String,
    /// Its incarnation (grows with restarts and refuted suspicions).
    pub incarnation: u64,
}

/// One worker.
#[derive(Debug, Serialize)]
pub struct WorkerStatus {
    /// Its index.
    pub worker: u32,
    /// Operations it executed since start.
    pub operations: u64,
    /// Key accesses per second over its last statistics window.
    pub ops_per_sec: f64,
    /// Fraction of its last window it was busy (0..=1).
    pub occupancy: f64,
    /// Open client connections.
    pub connections: u64,
    /// Live keys it holds.
    pub keys: u64,
    /// Bytes of data it holds in RAM.
    pub memory_bytes: u64,
}

/// Latency percentiles, µs (each at most 6.25 % above the true value).
#[derive(Debug, Serialize, PartialEq)]
pub struct Latency {
    /// Requests measured.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
}

/// What the node stores.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Storage {
    /// The node's tier: the keys and bytes below are that tier's share on this node.
    pub tier: String,
    /// Live keys.
    pub keys: u64,
    /// Bytes of data in RAM.
    pub memory_bytes: u64,
    /// The memory budget.
    pub memory_budget_bytes: u64,
    /// Bytes on disk (a disk-tier node; null on a memory node).
    pub disk_bytes: Option<u64>,
}

/// A hot key.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct HotKeyStatus {
    /// The key (lossy UTF-8, cut to 64 bytes), or null when names are withheld.
    pub key: Option<String>,
    /// Estimated accesses in the last window.
    pub accesses: u64,
}

fn health(status: i32) -> &'static str {
    match pb::NodeStatus::try_from(status) {
        Ok(pb::NodeStatus::Alive) => "alive",
        Ok(pb::NodeStatus::Suspect) => "suspect",
        Ok(pb::NodeStatus::Dead) => "dead",
        Ok(pb::NodeStatus::Left) => "left",
        Err(_) => "unknown",
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

fn shown(key: &[u8]) -> String {
    let cut = key.len() > MAX_KEY_SHOWN;
    let mut s = String::from_utf8_lossy(&key[..key.len().min(MAX_KEY_SHOWN)]).into_owned();
    if cut {
        s.push('…');
    }
    s
}

/// The status of `s`.
pub fn build(s: &StatusSnapshot<'_>) -> Status {
    let mut members: Vec<MemberStatus> = s
        .members
        .iter()
        .map(|m| MemberStatus {
            id: m.node_id.clone(),
            tier: m.role.clone(),
            health: health(m.status),
            is_self: m.node_id == s.node_id,
            front: m.front.clone(),
            resp: m.resp.clone(),
            incarnation: m.incarnation,
        })
        .collect();
    members.sort_by(|a, b| a.id.cmp(&b.id));

    let workers: Vec<WorkerStatus> = s
        .workers
        .iter()
        .map(|w| WorkerStatus {
            worker: w.worker,
            operations: w.core.shard.requests,
            ops_per_sec: if w.window.window_ms == 0 {
                0.0
            } else {
                w.window.accesses as f64 * 1e3 / w.window.window_ms as f64
            },
            occupancy: w.window.occupancy,
            connections: w.connections,
            keys: w.core.shard.live_keys,
            memory_bytes: w.core.shard.bytes,
        })
        .collect();

    let mut window = Histogram::default();
    let mut total = Cumulative::default();
    let mut hot: Vec<&HotKey> = Vec::new();
    let mut disk_bytes: Option<u64> = None;
    for w in s.workers {
        window.merge(&w.window.latency);
        total.add(&w.latency_total);
        hot.extend(&w.window.hot_keys);
        if let Some(d) = w.window.disk_bytes {
            disk_bytes = Some(disk_bytes.unwrap_or(0) + d);
        }
    }
    // Workers own disjoint keys, so their lists concatenate without duplicates.
    hot.sort_by(|a, b| b.accesses.cmp(&a.accesses).then(a.key.cmp(&b.key)));
    hot.truncate(MAX_HOT_KEYS);

    Status {
        version: env!("CARGO_PKG_VERSION"),
        node: s.node_id.to_string(),
        tier: s.tier.to_string(),
        uptime_ms: s.uptime_ms,
        members,
        operations: workers.iter().map(|w| w.operations).sum(),
        latency: Latency {
            count: window.count(),
            p50_us: us(window.quantile_ns(0.5)),
            p99_us: us(window.quantile_ns(0.99)),
        },
        latency_since_start: Latency {
            count: total.count(),
            p50_us: us(total.quantile_ns(0.5)),
            p99_us: us(total.quantile_ns(0.99)),
        },
        storage: Storage {
            tier: s.tier.to_string(),
            keys: workers.iter().map(|w| w.keys).sum(),
            memory_bytes: workers.iter().map(|w| w.memory_bytes).sum(),
            memory_budget_bytes: s.memory_budget_bytes,
            disk_bytes,
        },
        workers,
        hot_keys: hot
            .iter()
            .map(|h| HotKeyStatus {
                key: s.show_keys.then(|| shown(&h.key)),
                accesses: h.accesses,
            })
            .collect(),
        hot_key_names: s.show_keys,
    }
}

/// [`build`] as JSON text.
pub fn render(s: &StatusSnapshot<'_>) -> String {
    // Plain structs with string keys: serialising them cannot fail.
    serde_json::to_string(&build(s)).unwrap_or_else(|_| "{}".to_string())
}
