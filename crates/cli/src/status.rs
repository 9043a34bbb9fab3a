//! `latticekv status`: the cluster's members and ring ownership, and the node's workers
//! with their statistics (the last completed window: accesses, occupancy, latency, hot
//! keys) — as a table, or as JSON with `--json`.

use anyhow::Result;
use clap::Args;
use node::stats::latency::Histogram;
use serde_json::{json, Value};
use wire::pb;

use crate::commands::{connect, status_name, Target};

/// Hot keys shown for the node (merged across its workers).
const NODE_HOT_KEYS: usize = 10;

/// `latticekv status`
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    target: Target,
    /// Print the node's status as one JSON object (workers with their statistics, the
    /// node's hot keys and totals, the members) instead of tables.
    #[arg(long)]
    json: bool,
}

/// `status`: prints the status of the node at `--addr`.
pub async fn status(args: StatusArgs) -> Result<i32> {
    let c = connect(&args.target).await?;
    let s = c.status().await?;
    let layout = c.layout();
    let vector = |k: &[u8]| layout.vector(k);
    if args.json {
        let mut v = to_json(&s);
        add_replication(&mut v, &vector);
        println!("{v}");
        return Ok(0);
    }
    print_tables(&s, &args.target, &vector).await?;
    Ok(0)
}

/// Adds each hot key's replication vector (`replication: {memory, disk}`, as `{global,
/// local}`) to the JSON status.
fn add_replication(v: &mut Value, vector: &dyn Fn(&[u8]) -> placement::ReplicationVector) {
    let Some(hot) = v["hot_keys"].as_array_mut() else {
        return;
    };
    for h in hot {
        let key = match (h["key_hex"].as_str(), h["key"].as_str()) {
            (Some(hex), _) => decode_hex(hex),
            (None, Some(k)) => k.as_bytes().to_vec(),
            _ => continue,
        };
        h["replication"] = replication_json(&vector(&key));
    }
}

fn decode_hex(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
        .collect()
}

fn replication_json(v: &placement::ReplicationVector) -> Value {
    json!({
        "memory": { "global": v.memory.global, "local": v.memory.local },
        "disk": { "global": v.disk.global, "local": v.disk.local },
    })
}

/// The monitor's recent actions as JSON.
fn actions_json(p: &pb::PolicyReport) -> Value {
    json!({
        "rounds": p.rounds,
        "sent_ms": p.sent_ms,
        "dry_run": p.dry_run,
        "actions": p.actions.iter().map(|a| {
            let mut v = json!({
                "at_ms": a.at_ms,
                "action": a.kind,
                "reason": a.reason,
            });
            match a.kind.as_str() {
                "set_replication" | "reset_replication" => {
                    v["key"] = json!(display_key(&a.key));
                }
                _ => {
                    v["tier"] = json!(a.tier);
                }
            }
            if a.kind == "set_replication" {
                v["replication"] = json!({
                    "memory": { "global": a.memory_global, "local": a.memory_local },
                    "disk": { "global": a.disk_global, "local": a.disk_local },
                });
            }
            if a.kind == "add_nodes" {
                v["count"] = json!(a.count);
            }
            if a.kind == "remove_node" {
                v["node_id"] = json!(a.node_id);
            }
            if !a.error.is_empty() {
                v["error"] = json!(a.error);
            }
            v
        }).collect::<Vec<_>>(),
    })
}

/// One action, for people.
fn action_line(a: &pb::policy_report::Action) -> String {
    let what = match a.kind.as_str() {
        "set_replication" => format!(
            "replicate {} on {}×{} memory, {}×{} disk",
            display_key(&a.key),
            a.memory_global,
            a.memory_local,
            a.disk_global,
            a.disk_local
        ),
        "reset_replication" => format!("default placement for {}", display_key(&a.key)),
        "add_nodes" => format!("add {} {} node(s)", a.count, a.tier),
        "remove_node" => format!("remove {} node {}", a.tier, a.node_id),
        other => other.to_string(),
    };
    let error = if a.error.is_empty() {
        String::new()
    } else {
        format!(" [not done: {}]", a.error)
    };
    format!("{what} — {}{error}", a.reason)
}

/// A key for people: as text if it is UTF-8 without control characters, else escaped.
pub fn display_key(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(s) if !s.chars().any(char::is_control) => s.to_string(),
        _ => key.escape_ascii().to_string(),
    }
}

/// A worker's statistics, or empty ones if the node sent none (an older node).
fn stats_of(w: &pb::WorkerStatus) -> pb::WorkerStats {
    w.stats.clone().unwrap_or_default()
}

/// Accesses per second over the window.
fn per_sec(s: &pb::WorkerStats) -> f64 {
    if s.window_ms == 0 {
        0.0
    } else {
        s.accesses as f64 * 1000.0 / s.window_ms as f64
    }
}

fn histogram(s: &pb::WorkerStats) -> Histogram {
    Histogram {
        counts: s.latency_buckets.clone(),
        sum_ns: s.latency_sum_ns,
        max_ns: s.latency_max_ns,
    }
}

/// The node's hot keys: each worker's, summed by key (a key served by several workers of
/// the node counts its accesses on each), most accessed first.
pub fn node_hot_keys(s: &pb::Status, n: usize) -> Vec<(Vec<u8>, u64)> {
    let mut sums: Vec<(Vec<u8>, u64)> = Vec::new();
    for w in &s.workers {
        for h in &stats_of(w).hot_keys {
            match sums.iter_mut().find(|(k, _)| k[..] == h.key[..]) {
                Some((_, a)) => *a += h.accesses,
                None => sums.push((h.key.to_vec(), h.accesses)),
            }
        }
    }
    sums.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    sums.truncate(n);
    sums
}

fn key_json(key: &[u8], accesses: u64) -> Value {
    match std::str::from_utf8(key) {
        Ok(k) => json!({ "key": k, "accesses": accesses }),
        Err(_) => json!({
            "key": key.escape_ascii().to_string(),
            "key_hex": key.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            "accesses": accesses,
        }),
    }
}

fn latency_json(h: &Histogram, buckets: bool) -> Value {
    let mut v = json!({
        "count": h.count(),
        "mean_ns": h.mean_ns(),
        "p50_ns": h.quantile_ns(0.5),
        "p99_ns": h.quantile_ns(0.99),
        "p999_ns": h.quantile_ns(0.999),
        "max_ns": h.max_ns,
    });
    if buckets {
        v["buckets"] = json!(h.trimmed());
    }
    v
}

/// The name of a backing-store mode code.
fn mode_name(code: u32) -> &'static str {
    node::writeback::Mode::from_code(code).name()
}

fn backing_json(b: &pb::BackingStatus) -> Value {
    json!({
        "mode": mode_name(b.mode),
        "mode_ms": b.mode_ms,
        "dirty_keys": b.dirty_keys,
        "buffered_bytes": b.dirty_bytes,
        "failed_keys": b.failed_keys,
        "applied_keys": b.applied_keys,
        "applied_per_sec": b.applied_per_sec,
        "apply_failures": b.apply_failures,
        "fetched_keys": b.fetched_keys,
        "refused_reads": b.refused_reads,
        "refused_writes": b.refused_writes,
        "failures": b.failures,
        "last_error": b.last_error,
    })
}

/// The node's backing-store state: the most severe mode of its workers (failed, then
/// recovery, then normal), the others summed.
fn node_backing(s: &pb::Status) -> Option<pb::BackingStatus> {
    let severity = |m: u32| match node::writeback::Mode::from_code(m) {
        node::writeback::Mode::Failed => 2,
        node::writeback::Mode::Recovery => 1,
        node::writeback::Mode::Normal => 0,
    };
    let mut out: Option<pb::BackingStatus> = None;
    for b in s.workers.iter().filter_map(|w| w.backing.as_ref()) {
        let o = out.get_or_insert_with(|| pb::BackingStatus {
            mode: b.mode,
            mode_ms: b.mode_ms,
            ..Default::default()
        });
        if severity(b.mode) > severity(o.mode) {
            o.mode = b.mode;
            o.mode_ms = b.mode_ms;
        }
        o.dirty_keys += b.dirty_keys;
        o.dirty_bytes += b.dirty_bytes;
        o.failed_keys += b.failed_keys;
        o.applied_keys += b.applied_keys;
        o.applied_per_sec += b.applied_per_sec;
        o.apply_failures += b.apply_failures;
        o.fetched_keys += b.fetched_keys;
        o.refused_reads += b.refused_reads;
        o.refused_writes += b.refused_writes;
        o.failures += b.failures;
        if !b.last_error.is_empty() {
            o.last_error = b.last_error.clone();
        }
    }
    out
}

fn worker_json(w: &pb::WorkerStatus) -> Value {
    let s = stats_of(w);
    json!({
        "worker": w.worker,
        "address": w.address,
        "keys": w.keys,
        "memory_bytes": w.memory_bytes,
        "requests": w.requests,
        "connections": w.connections,
        "storage_errors": w.storage_errors,
        "subscriptions": w.subscriptions,
        "evictions": w.evictions,
        "disk_fetches": w.disk_fetches,
        "backing": w.backing.as_ref().map(backing_json),
        "stats": {
            "window_seq": s.window_seq,
            "window_ms": s.window_ms,
            "period_ms": s.period_ms,
            "accesses": s.accesses,
            "accesses_per_sec": per_sec(&s),
            "accessed_keys": s.accessed_keys,
            "reused_keys": s.reused_keys,
            "access_sum_squares": s.access_sum_squares,
            "occupancy": s.occupancy,
            "latency": latency_json(&histogram(&s), true),
            "memory_bytes": s.memory_bytes,
            "disk_bytes": s.disk_bytes,
            "hot_keys": s.hot_keys.iter().map(|h| key_json(&h.key, h.accesses)).collect::<Vec<_>>(),
        },
    })
}

/// The node's totals over its workers' windows.
fn aggregate_json(s: &pb::Status) -> Value {
    let stats: Vec<pb::WorkerStats> = s.workers.iter().map(stats_of).collect();
    let mut latency = Histogram {
        counts: Vec::new(),
        sum_ns: 0,
        max_ns: 0,
    };
    for w in &stats {
        latency.merge(&histogram(w));
    }
    let occupancy: Vec<f64> = stats.iter().map(|w| w.occupancy).collect();
    json!({
        "accesses": stats.iter().map(|w| w.accesses).sum::<u64>(),
        "accesses_per_sec": stats.iter().map(per_sec).sum::<f64>(),
        // Workers hold disjoint keys unless a key's local replication is above 1.
        "accessed_keys": stats.iter().map(|w| w.accessed_keys).sum::<u64>(),
        "reused_keys": stats.iter().filter_map(|w| w.reused_keys).sum::<u64>(),
        "access_sum_squares": stats.iter().map(|w| w.access_sum_squares).sum::<u64>(),
        "occupancy_mean": occupancy.iter().sum::<f64>() / occupancy.len().max(1) as f64,
        "occupancy_max": occupancy.iter().copied().fold(0.0, f64::max),
        "latency": latency_json(&latency, false),
        "memory_bytes": stats.iter().map(|w| w.memory_bytes).sum::<u64>(),
        "disk_bytes": stats.iter().map(|w| w.disk_bytes).sum::<u64>(),
    })
}

/// The status as one JSON object.
pub fn to_json(s: &pb::Status) -> Value {
    let share = |id: &str| {
        s.ownership
            .iter()
            .find(|o| o.node_id == id)
            .map_or(0.0, |o| o.share)
    };
    json!({
        "node_id": s.node_id,
        "version": s.version,
        "tier": s.tier,
        "uptime_seconds": s.uptime_seconds,
        "front_address": s.front_address,
        "resp_address": s.resp_address,
        "memory_budget_bytes": s.memory_budget_bytes,
        "disk_capacity_bytes": s.disk_capacity_bytes,
        "workers": s.workers.iter().map(worker_json).collect::<Vec<_>>(),
        "backing": node_backing(s).as_ref().map(backing_json),
        "hot_keys": node_hot_keys(s, NODE_HOT_KEYS)
            .iter()
            .map(|(k, a)| key_json(k, *a))
            .collect::<Vec<_>>(),
        "aggregate": aggregate_json(s),
        "actions": s.policy.as_ref().map(actions_json),
        "members": s.members.iter().map(|m| json!({
            "node_id": m.node_id,
            "role": m.role,
            "status": status_name(m.status),
            "incarnation": m.incarnation,
            "ring_share": share(&m.node_id),
            "front": m.front,
            "placement": m.placement,
        })).collect::<Vec<_>>(),
    })
}

/// Whether the hash-tag rule is in force among the storage members in the rings, and if
/// not which of them keep whole keys (docs/protocol.md, "Hash tags").
fn placement_line(members: &[pb::Member]) -> String {
    let whole: Vec<&str> = members
        .iter()
        .filter(|m| {
            (m.role == "memory" || m.role == "disk")
                && matches!(status_name(m.status), "alive" | "suspect")
                && m.placement < placement::PLACEMENT_HASH_TAGS
        })
        .map(|m| m.node_id.as_str())
        .collect();
    if whole.is_empty() {
        "hash tags (keys sharing a {tag} share a worker)".into()
    } else {
        format!(
            "whole keys (members placing whole keys: {})",
            whole.join(", ")
        )
    }
}

/// Bytes, for people: `0 B`, `512 B`, `1.5 KiB`, `2.0 GiB` (binary units; `--json` keeps
/// the raw counts).
pub(crate) fn size(bytes: u64) -> String {
    bytesize::ByteSize::b(bytes).display().iec().to_string()
}

/// Microseconds, for people.
fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

async fn print_tables(
    s: &pb::Status,
    target: &Target,
    vector: &dyn Fn(&[u8]) -> placement::ReplicationVector,
) -> Result<()> {
    println!("node      {} (latticekv {})", s.node_id, s.version);
    if !s.tier.is_empty() {
        println!("tier      {}", s.tier);
    }
    println!("uptime    {} s", s.uptime_seconds);
    if !s.front_address.is_empty() {
        println!("native    {}", s.front_address);
        println!("resp      {}", s.resp_address);
        println!(
            "memory    {} of {} budget",
            size(s.workers.iter().map(|w| w.memory_bytes).sum::<u64>()),
            size(s.memory_budget_bytes)
        );
    }
    println!("placement {}", placement_line(&s.members));
    let share = |id: &str| {
        s.ownership
            .iter()
            .find(|o| o.node_id == id)
            .map_or(0.0, |o| o.share * 100.0)
    };
    println!();
    println!("member            role     status   incarnation    ring %   keys      front");
    let mut members = s.members.clone();
    members.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    for m in &members {
        let keys = if m.role == "routing" || !matches!(status_name(m.status), "alive" | "suspect") {
            "-".to_string()
        } else if m.node_id == s.node_id {
            s.workers.iter().map(|w| w.keys).sum::<u64>().to_string()
        } else {
            match client::Client::connect_with(&m.front, target.options()?).await {
                Ok(peer) => match peer.status().await {
                    Ok(ps) => ps.workers.iter().map(|w| w.keys).sum::<u64>().to_string(),
                    Err(_) => "?".into(),
                },
                Err(_) => "?".into(),
            }
        };
        println!(
            "{:<17} {:<8} {:<8} {:<14} {:>6.1}   {:<9} {}",
            m.node_id,
            m.role,
            status_name(m.status),
            m.incarnation,
            share(&m.node_id),
            keys,
            m.front
        );
    }
    if s.workers.is_empty() {
        return Ok(());
    }
    println!();
    println!(
        "worker  address               keys       memory       requests  connections  storage-errors  subscriptions  evictions  disk-fetches"
    );
    for w in &s.workers {
        println!(
            "{:<7} {:<21} {:<10} {:<12} {:<9} {:<12} {:<15} {:<14} {:<10} {}",
            w.worker,
            w.address,
            w.keys,
            size(w.memory_bytes),
            w.requests,
            w.connections,
            w.storage_errors,
            w.subscriptions,
            w.evictions,
            w.disk_fetches
        );
    }
    if let Some(b) = node_backing(s) {
        println!();
        println!(
            "backing store: {} for {:.1} s, {} dirty keys ({} buffered), {} on the failed \
             list, applying {:.0} keys/s; {} applied, {} read through, {} reads and {} writes \
             refused",
            mode_name(b.mode),
            b.mode_ms as f64 / 1000.0,
            b.dirty_keys,
            size(b.dirty_bytes),
            b.failed_keys,
            b.applied_per_sec,
            b.applied_keys,
            b.fetched_keys,
            b.refused_reads,
            b.refused_writes
        );
        if !b.last_error.is_empty() {
            println!("  last store error: {}", b.last_error);
        }
    }
    let window_ms = s
        .workers
        .iter()
        .map(|w| stats_of(w).window_ms)
        .max()
        .unwrap_or(0);
    println!();
    println!(
        "statistics over the last {:.1} s",
        window_ms as f64 / 1000.0
    );
    println!("worker  accesses/s    distinct    occupancy %  p50 µs      p99 µs      requests");
    for w in &s.workers {
        let st = stats_of(w);
        let h = histogram(&st);
        println!(
            "{:<7} {:<13.1} {:<11} {:<12.1} {:<11} {:<11} {}",
            w.worker,
            per_sec(&st),
            st.accessed_keys,
            st.occupancy * 100.0,
            us(h.quantile_ns(0.5)),
            us(h.quantile_ns(0.99)),
            h.count()
        );
    }
    let hot = node_hot_keys(s, NODE_HOT_KEYS);
    if !hot.is_empty() {
        println!();
        println!("hot keys (accesses in the window; replication: memory nodes×workers, disk)");
        for (k, a) in hot {
            let v = vector(&k);
            println!(
                "  {a:<12} {:<9} {}",
                format!("{}×{}, {}", v.memory.global, v.memory.local, v.disk.global),
                display_key(&k)
            );
        }
    }
    if let Some(p) = &s.policy {
        println!();
        println!(
            "monitor: {} rounds{}; recent actions (oldest first)",
            p.rounds,
            if p.dry_run { " (dry run)" } else { "" }
        );
        if p.actions.is_empty() {
            println!("  none");
        }
        for a in p.actions.iter().rev().take(10).rev() {
            println!("  {}", action_line(a));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_with(workers: Vec<Vec<(&'static [u8], u64)>>) -> pb::Status {
        pb::Status {
            node_id: "n".into(),
            workers: workers
                .into_iter()
                .enumerate()
                .map(|(i, hot)| pb::WorkerStatus {
                    worker: i as u32,
                    stats: Some(pb::WorkerStats {
                        window_seq: 4,
                        window_ms: 2_000,
                        accesses: 1_000,
                        occupancy: 0.25 * (i + 1) as f64,
                        latency_buckets: vec![0, 0, 3],
                        latency_sum_ns: 6,
                        latency_max_ns: 2,
                        hot_keys: hot
                            .into_iter()
                            .map(|(k, a)| pb::worker_stats::HotKey {
                                key: k.to_vec().into(),
                                accesses: a,
                            })
                            .collect(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn hot_keys_merge_across_workers_most_accessed_first() {
        let s = status_with(vec![
            vec![(b"a", 10), (b"b", 7)],
            vec![(b"b", 5), (b"c", 11)],
        ]);
        let hot = node_hot_keys(&s, 2);
        assert_eq!(hot, vec![(b"b".to_vec(), 12), (b"c".to_vec(), 11)]);
    }

    #[test]
    fn json_has_per_worker_statistics_node_hot_keys_and_totals() {
        let s = status_with(vec![vec![(b"hot", 900), (b"\xff\x00", 20)], vec![]]);
        let v = to_json(&s);
        assert_eq!(v["hot_keys"][0]["key"], "hot");
        assert_eq!(v["hot_keys"][0]["accesses"], 900);
        assert_eq!(v["hot_keys"][1]["key"], "\\xff\\x00");
        assert_eq!(v["hot_keys"][1]["key_hex"], "ff00");
        assert_eq!(v["workers"][0]["stats"]["accesses_per_sec"], 500.0);
        assert_eq!(v["workers"][1]["stats"]["latency"]["count"], 3);
        assert_eq!(v["aggregate"]["accesses"], 2_000);
        assert_eq!(v["aggregate"]["latency"]["count"], 6);
        assert_eq!(v["aggregate"]["occupancy_max"], 0.5);
        assert_eq!(display_key(b"a\nb"), "a\\nb");
    }
}
