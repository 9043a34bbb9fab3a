//! `INFO [section …]`: Redis's sections with the fields common clients read, filled from
//! every worker's counters and key space.

use std::rc::Rc;

use tokio::sync::oneshot;

use crate::driver::worker::{all_stats, Worker, WorkerMsg};

/// The sections `INFO` (or `INFO default`/`all`/`everything`) reports, in Redis's order.
const SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "keyspace",
];

/// Which sections `INFO` with these arguments (lower case) reports.
pub(crate) fn sections(args: &[String]) -> Vec<&'static str> {
    if args.is_empty()
        || args
            .iter()
            .any(|a| a == "default" || a == "all" || a == "everything")
    {
        return SECTIONS.to_vec();
    }
    SECTIONS
        .iter()
        .copied()
        .filter(|s| args.iter().any(|a| a == s))
        .collect()
}

/// Live keys and keys with a deadline on this node (primary replicas, as `DBSIZE`).
pub(crate) async fn keyspace(w: &Worker) -> (u64, u64) {
    let (mut keys, mut expires) = (0, 0);
    for i in 0..w.shared.mesh.len() as u32 {
        let (tx, rx) = oneshot::channel();
        let ask = WorkerMsg::Run(Box::new(move |w: &Rc<Worker>| {
            let _ = tx.send(w.core().shard().keyspace_counts());
        }));
        if w.shared.mesh.send(i, ask).await.is_ok() {
            if let Ok((k, e)) = rx.await {
                keys += k;
                expires += e;
            }
        }
    }
    (keys, expires)
}

/// `1.5K`-style sizes, as Redis's `used_memory_human`.
fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b < 1024.0 {
        format!("{bytes}B")
    } else if b < 1024.0 * 1024.0 {
        format!("{:.2}K", b / 1024.0)
    } else if b < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}M", b / 1024.0 / 1024.0)
    } else {
        format!("{:.2}G", b / 1024.0 / 1024.0 / 1024.0)
    }
}

/// Seconds of CPU this process used (user, system), from `getrusage`.
fn cpu_seconds() -> (f64, f64) {
    // SAFETY: an all-zero `rusage` is a valid value for getrusage to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes the struct we pass; RUSAGE_SELF needs nothing else.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return (0.0, 0.0);
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(usage.ru_utime), s(usage.ru_stime))
}

/// The text of `INFO` for `sections`.
pub(crate) async fn info(w: &Worker, sections: &[&str]) -> String {
    let shared = &w.shared;
    let stats = all_stats(shared).await;
    let memory: u64 = stats.iter().map(|s| s.core.shard.bytes).sum();
    let commands: u64 = stats.iter().map(|s| s.core.shard.requests).sum();
    let clients: u64 = stats.iter().map(|s| s.connections).sum();
    let evicted: u64 = stats.iter().map(|s| s.core.shard.evictions).sum();
    let maxmemory = shared.config.limits.memory_budget_bytes();
    let uptime = shared.started.elapsed().as_secs();
    let mut out = String::new();
    for (i, section) in sections.iter().enumerate() {
        if i > 0 {
            out.push_str("\r\n");
        }
        let body = match *section {
            "server" => format!(
                "# Server\r\nredis_version:{}\r\nlatticekv_version:{}\r\nredis_mode:standalone\r\n\
                 os:{} {}\r\narch_bits:{}\r\nprocess_id:{}\r\ntcp_port:{}\r\n\
                 uptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nworkers:{}\r\n",
                super::server::REDIS_COMPAT_VERSION,
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH,
                usize::BITS,
                std::process::id(),
                shared.resp_port,
                uptime / 86400,
                shared.mesh.len(),
            ),
            "clients" => format!(
                "# Clients\r\nconnected_clients:{clients}\r\nblocked_clients:0\r\n\
                 maxclients:{}\r\n",
                shared.config.limits.max_connections
            ),
            "memory" => format!(
                "# Memory\r\nused_memory:{memory}\r\nused_memory_human:{}\r\n\
                 maxmemory:{maxmemory}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:noeviction\r\n",
                human(memory),
                human(maxmemory),
            ),
            "persistence" => "# Persistence\r\nloading:0\r\nrdb_changes_since_last_save:0\r\n\
                 rdb_bgsave_in_progress:0\r\naof_enabled:0\r\naof_rewrite_in_progress:0\r\n"
                .to_string(),
            "stats" => format!(
                "# Stats\r\ntotal_connections_received:0\r\n\
                 total_commands_processed:{commands}\r\nevicted_keys:{evicted}\r\n\
                 expired_keys:0\r\nkeyspace_hits:0\r\nkeyspace_misses:0\r\n"
            ),
            "replication" => "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n".to_string(),
            "cpu" => {
                let (user, sys) = cpu_seconds();
                format!("# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\n")
            }
            _ => {
                let (keys, expires) = keyspace(w).await;
                if keys == 0 {
                    "# Keyspace\r\n".to_string()
                } else {
                    format!("# Keyspace\r\ndb0:keys={keys},expires={expires},avg_ttl=0\r\n")
                }
            }
        };
        out.push_str(&body);
    }
    out
}
