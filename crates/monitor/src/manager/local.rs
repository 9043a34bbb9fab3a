//! [`LocalManager`]: storage nodes as `latticekv server` child processes of this one.
//!
//! Node `i` of a tier is `mem<i>` or `disk<i>` (prefixes configurable), with its data under
//! `data_root/<id>`; ids are never reused (the first free ordinal is above every directory
//! already under the data root), so a node that left cannot come back as a stale member.
//! Every node listens on ephemeral ports of `host` and joins through the seeds and the
//! managed nodes running. A removal asks the node to leave and waits for it to exit; a node
//! that exits without being asked is started again with the same id and data directory
//! after a back-off ([`RestartPolicy`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::admin::{self, AdminAccess};
use super::process::{wait_exit, Printed, Proc, Spawn};
use super::restart::{Backoff, RestartPolicy};
use super::{ClusterManager, ManagedNode, ManagerError, ManagerEvent, NodeState};
use crate::snapshot::Tier;

/// Flags the manager sets itself; [`LocalConfig::args`] must not contain them.
const MANAGED_FLAGS: [&str; 7] = [
    "--node-id",
    "--tier",
    "--listen",
    "--resp",
    "--data-dir",
    "--seeds",
    "--no-leave",
];
/// Most seeds passed to a new node (the configured ones first).
const MAX_SEEDS: usize = 8;

/// Settings of a [`LocalManager`].
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// The `latticekv` binary.
    pub binary: PathBuf,
    /// Where nodes' data directories go: `data_root/<id>`.
    pub data_root: PathBuf,
    /// The address every node listens on (ephemeral ports). Default: 127.0.0.1.
    pub host: IpAddr,
    /// Front addresses of members to join through (besides the managed nodes running).
    pub seeds: Vec<String>,
    /// More `latticekv server` flags for every node (`--workers`, `--replication`, TLS
    /// files, `--config`…); not the flags the manager sets (`--node-id`, `--tier`,
    /// `--listen`, `--resp`, `--data-dir`, `--seeds`, `--no-leave`).
    pub args: Vec<String>,
    /// Environment of every node: secrets go here (`LATTICEKV_CLUSTER_SECRET`,
    /// `LATTICEKV_PASSWORD`), not in `args`, which `ps` shows.
    pub env: Vec<(String, String)>,
    /// Id prefix of memory-tier nodes. Default: `mem`.
    pub memory_prefix: String,
    /// Id prefix of disk-tier nodes. Default: `disk`.
    pub disk_prefix: String,
    /// Most nodes managed at once. Default: 64.
    pub max_nodes: usize,
    /// How long a node may take to print its addresses. Default: 30 s.
    pub start_timeout: Duration,
    /// How long a leave (the hand-off of every key) may take. Default: 30 min (about
    /// 7 s per million keys, docs/benchmarks.md, with room for a slow disk).
    pub leave_timeout: Duration,
    /// How long a node that left may take to exit before it is killed. Default: 30 s.
    pub exit_timeout: Duration,
    /// The restart back-off of nodes that died.
    pub restart: RestartPolicy,
    /// Credentials and TLS for the leave request.
    pub admin: AdminAccess,
    /// Delete a node's data directory once it left (every key handed off). Default: true
    /// (its id is never used again).
    pub remove_data_after_leave: bool,
}

impl LocalConfig {
    /// Defaults for nodes of `binary` keeping their data under `data_root`.
    pub fn new(binary: impl Into<PathBuf>, data_root: impl Into<PathBuf>) -> LocalConfig {
        LocalConfig {
            binary: binary.into(),
            data_root: data_root.into(),
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            seeds: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
            memory_prefix: "mem".into(),
            disk_prefix: "disk".into(),
            max_nodes: 64,
            start_timeout: Duration::from_secs(30),
            leave_timeout: Duration::from_secs(30 * 60),
            exit_timeout: Duration::from_secs(30),
            restart: RestartPolicy::default(),
            admin: AdminAccess::default(),
            remove_data_after_leave: true,
        }
    }

    fn prefix(&self, tier: Tier) -> &str {
        match tier {
            Tier::Memory => &self.memory_prefix,
            Tier::Disk => &self.disk_prefix,
        }
    }

    fn validate(&self) -> Result<(), ManagerError> {
        let bad = |m: String| Err(ManagerError::InvalidConfig(m));
        if let Some(flag) = self.args.iter().find(|a| {
            MANAGED_FLAGS
                .iter()
                .any(|f| *a == f || a.starts_with(&format!("{f}=")))
        }) {
            return bad(format!("args must not set {flag}: the manager sets it"));
        }
        if self.memory_prefix.is_empty()
            || self.disk_prefix.is_empty()
            || self.memory_prefix == self.disk_prefix
        {
            return bad("the tiers' id prefixes must be distinct and not empty".into());
        }
        if self.max_nodes == 0 {
            return bad("max_nodes must be at least 1".into());
        }
        Ok(())
    }
}

/// The ordinal of `name` if it is `prefix` followed by decimal digits.
fn ordinal(prefix: &str, name: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// One managed node.
struct Entry {
    tier: Tier,
    data_dir: PathBuf,
    /// The process, while one runs (or ran and its exit is not yet handled).
    proc: Option<Proc>,
    printed: Option<Printed>,
    state: NodeState,
    backoff: Backoff,
    /// When to start it again (state `Restarting`).
    retry_at: Option<Instant>,
    /// A leave no `remove` call waits for any more (it timed out or was cancelled):
    /// `check` forgets the node once it exits.
    unattended: bool,
}

struct Inner {
    nodes: BTreeMap<String, Entry>,
    /// Next ordinal per tier (memory, disk).
    next: [u32; 2],
}

/// Manages storage nodes as child processes; see the [module docs](self).
pub struct LocalManager {
    config: LocalConfig,
    inner: Mutex<Inner>,
}

impl LocalManager {
    /// A manager with no nodes yet. Creates the data root; ordinals start above the
    /// directories already in it.
    pub fn new(config: LocalConfig) -> Result<LocalManager, ManagerError> {
        config.validate()?;
        let io = |what: String| move |source| ManagerError::Io { what, source };
        let root = &config.data_root;
        std::fs::create_dir_all(root).map_err(io(format!("creating {}", root.display())))?;
        let mut next = [1u32; 2];
        for dirent in std::fs::read_dir(root).map_err(io(format!("reading {}", root.display())))? {
            let name = dirent
                .map_err(io(format!("reading {}", root.display())))?
                .file_name();
            let Some(name) = name.to_str() else { continue };
            for tier in Tier::ALL {
                if let Some(n) = ordinal(config.prefix(tier), name) {
                    let slot = &mut next[tier.index()];
                    *slot = (*slot).max(n.saturating_add(1));
                }
            }
        }
        Ok(LocalManager {
            config,
            inner: Mutex::new(Inner {
                nodes: BTreeMap::new(),
                next,
            }),
        })
    }

    /// Its settings.
    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The process id of a managed node's current process.
    pub fn pid(&self, id: &str) -> Option<u32> {
        self.lock()
            .nodes
            .get(id)
            .and_then(|e| e.proc.as_ref())
            .filter(|p| p.exit_status().is_none())
            .map(Proc::pid)
    }

    /// Stops every node (SIGTERM: it stops without leaving, its data stays in its data
    /// directory) and forgets them; a node still running after the exit timeout is killed.
    /// Returns how many were stopped.
    pub async fn shutdown(&self) -> usize {
        let nodes = std::mem::take(&mut self.lock().nodes);
        let procs: Vec<(String, Proc)> = nodes
            .into_iter()
            .filter_map(|(id, e)| e.proc.map(|p| (id, p)))
            .collect();
        for (_, p) in &procs {
            p.terminate();
        }
        for (id, p) in &procs {
            if !wait_exit(p.exited(), self.config.exit_timeout).await {
                tracing::warn!(node = %id, "did not stop after SIGTERM; killing it");
                p.kill();
                wait_exit(p.exited(), self.config.exit_timeout).await;
            }
        }
        procs.len()
    }

    /// Command-line arguments of node `id`.
    fn args(&self, id: &str, tier: Tier, dir: &Path) -> Vec<String> {
        let any_port = |ip| SocketAddr::new(ip, 0).to_string();
        let mut args = vec![
            "server".to_string(),
            "--no-leave".into(),
            "--node-id".into(),
            id.into(),
            "--tier".into(),
            tier.to_string(),
            "--listen".into(),
            any_port(self.config.host),
            "--resp".into(),
            any_port(self.config.host),
            "--data-dir".into(),
            dir.display().to_string(),
        ];
        let mut seeds: Vec<String> = self.config.seeds.clone();
        for (other, e) in &self.lock().nodes {
            if other != id && e.state == NodeState::Running {
                if let Some(p) = e.printed.as_ref().filter(|p| !seeds.contains(&p.native)) {
                    seeds.push(p.native.clone());
                }
            }
        }
        seeds.truncate(MAX_SEEDS);
        if !seeds.is_empty() {
            args.extend(["--seeds".into(), seeds.join(",")]);
        }
        args.extend(self.config.args.iter().cloned());
        args
    }

    /// Starts node `id`'s process and waits until it listens.
    async fn start(&self, id: &str, tier: Tier, dir: &Path) -> Result<(Proc, Printed), String> {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let args = self.args(id, tier, dir);
        Proc::start(Spawn {
            binary: &self.config.binary,
            args: &args,
            env: &self.config.env,
            start_timeout: self.config.start_timeout,
        })
        .await
    }

    /// Reserves the next id of `tier`: an entry in state `Starting` without a process.
    fn reserve(&self, tier: Tier) -> Result<(String, PathBuf), ManagerError> {
        let mut inner = self.lock();
        if inner.nodes.len() >= self.config.max_nodes {
            return Err(ManagerError::TooManyNodes {
                asked: 1,
                limit: self.config.max_nodes,
            });
        }
        let n = inner.next[tier.index()];
        inner.next[tier.index()] = n.saturating_add(1);
        let id = format!("{}{n}", self.config.prefix(tier));
        let dir = self.config.data_root.join(&id);
        inner.nodes.insert(
            id.clone(),
            Entry {
                tier,
                data_dir: dir.clone(),
                proc: None,
                printed: None,
                state: NodeState::Starting,
                backoff: Backoff::new(),
                retry_at: None,
                unattended: false,
            },
        );
        Ok((id, dir))
    }
}

/// Drops a reserved entry whose start did not complete (failed, or the `add` was
/// cancelled).
struct Reservation<'a> {
    manager: &'a LocalManager,
    id: String,
    done: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.manager.lock().nodes.remove(&self.id);
        }
    }
}

/// Marks a leave as unattended when `remove` stops waiting for it (a timeout, or the call
/// was cancelled), so `check` forgets the node once it exits.
struct Unattended<'a> {
    manager: &'a LocalManager,
    id: &'a str,
    armed: bool,
}

impl Drop for Unattended<'_> {
    fn drop(&mut self) {
        if self.armed {
            if let Some(e) = self.manager.lock().nodes.get_mut(self.id) {
                e.unattended = true;
            }
        }
    }
}

#[async_trait]
impl ClusterManager for LocalManager {
    async fn add(&self, tier: Tier, count: u32) -> Result<Vec<String>, ManagerError> {
        {
            let inner = self.lock();
            if inner.nodes.len().saturating_add(count as usize) > self.config.max_nodes {
                return Err(ManagerError::TooManyNodes {
                    asked: count,
                    limit: self.config.max_nodes,
                });
            }
        }
        let mut started = Vec::new();
        for _ in 0..count {
            let (id, dir) = self.reserve(tier)?;
            let mut reservation = Reservation {
                manager: self,
                id: id.clone(),
                done: false,
            };
            let (proc, printed) =
                self.start(&id, tier, &dir)
                    .await
                    .map_err(|detail| ManagerError::Start {
                        id: id.clone(),
                        detail,
                    })?;
            tracing::info!(node = %id, %tier, native = %printed.native, pid = proc.pid(), "node started");
            let mut inner = self.lock();
            if let Some(e) = inner.nodes.get_mut(&id) {
                e.backoff.started(Instant::now());
                e.proc = Some(proc);
                e.printed = Some(printed);
                e.state = NodeState::Running;
                reservation.done = true;
            }
            drop(inner);
            started.push(id);
        }
        Ok(started)
    }

    async fn remove(&self, tier: Tier, node_id: &str) -> Result<String, ManagerError> {
        let (addr, exited) = {
            let mut inner = self.lock();
            let entry = inner
                .nodes
                .get_mut(node_id)
                .filter(|e| e.tier == tier)
                .ok_or_else(|| ManagerError::UnknownNode {
                    tier,
                    id: node_id.into(),
                })?;
            let running = entry.state == NodeState::Running;
            let (Some(proc), Some(printed), true) = (&entry.proc, &entry.printed, running) else {
                return Err(ManagerError::NotRunning {
                    id: node_id.into(),
                    state: entry.state,
                });
            };
            let found = (printed.native.clone(), proc.exited());
            entry.state = NodeState::Leaving;
            found
        };
        tracing::info!(node = %node_id, %addr, "asking the node to leave");
        let mut guard = Unattended {
            manager: self,
            id: node_id,
            armed: true,
        };
        let left = tokio::time::timeout(
            self.config.leave_timeout,
            admin::leave(&addr, &self.config.admin),
        )
        .await;
        match left {
            Err(_) => {
                return Err(ManagerError::LeaveTimeout {
                    id: node_id.into(),
                    after: self.config.leave_timeout,
                })
            }
            Ok(Err(source)) => {
                // Not leaving after all: a running node stays; one that died is restarted
                // by `check` (it may hold keys not handed off).
                guard.armed = false;
                if let Some(e) = self.lock().nodes.get_mut(node_id) {
                    e.state = NodeState::Running;
                }
                return Err(ManagerError::Leave {
                    id: node_id.into(),
                    addr,
                    source,
                });
            }
            Ok(Ok(())) => {}
        }
        if !wait_exit(exited.clone(), self.config.exit_timeout).await {
            tracing::warn!(node = %node_id, after = ?self.config.exit_timeout,
                "left but did not exit; killing it");
            if let Some(p) = self.lock().nodes.get(node_id).and_then(|e| e.proc.as_ref()) {
                p.kill();
            }
            wait_exit(exited, self.config.exit_timeout).await;
        }
        let entry = self.lock().nodes.remove(node_id);
        guard.armed = false;
        if let (Some(e), true) = (entry, self.config.remove_data_after_leave) {
            if let Err(err) = tokio::fs::remove_dir_all(&e.data_dir).await {
                tracing::warn!(node = %node_id, dir = %e.data_dir.display(), error = %err,
                    "could not remove the data directory of a node that left");
            }
        }
        tracing::info!(node = %node_id, "node left the cluster and stopped");
        Ok(node_id.to_string())
    }

    async fn nodes(&self) -> Result<Vec<ManagedNode>, ManagerError> {
        Ok(self
            .lock()
            .nodes
            .iter()
            .map(|(id, e)| ManagedNode {
                id: id.clone(),
                tier: e.tier,
                state: e.state,
                address: e.printed.as_ref().map(|p| p.native.clone()),
                restarts: e.backoff.restarts(),
            })
            .collect())
    }

    async fn check(&self) -> Result<Vec<ManagerEvent>, ManagerError> {
        let now = Instant::now();
        let mut events = Vec::new();
        let mut due = Vec::new();
        {
            let mut inner = self.lock();
            let mut gone = Vec::new();
            for (id, e) in inner.nodes.iter_mut() {
                let status = e.proc.as_ref().and_then(Proc::exit_status);
                match (e.state, status) {
                    (NodeState::Leaving, Some(_)) if e.unattended => gone.push(id.clone()),
                    (NodeState::Running, Some(status)) => {
                        e.proc = None;
                        let wait = e.backoff.failed(now, &self.config.restart);
                        e.retry_at = Some(now + wait);
                        e.state = NodeState::Restarting;
                        tracing::warn!(node = %id, %status, restart_in = ?wait,
                            "node died; restarting it with its id and data");
                        events.push(ManagerEvent::Died {
                            id: id.clone(),
                            how: status.to_string(),
                            restart_in_ms: millis(wait),
                        });
                    }
                    _ => {}
                }
                if e.state == NodeState::Restarting && e.retry_at.is_some_and(|t| t <= now) {
                    e.state = NodeState::Starting;
                    due.push((id.clone(), e.tier, e.data_dir.clone()));
                }
            }
            for id in gone {
                inner.nodes.remove(&id);
                tracing::info!(node = %id, "a node that was leaving has exited");
                events.push(ManagerEvent::Gone { id });
            }
        }
        for (id, tier, dir) in due {
            let started = self.start(&id, tier, &dir).await;
            let mut inner = self.lock();
            let Some(e) = inner.nodes.get_mut(&id) else {
                continue;
            };
            match started {
                Ok((proc, printed)) => {
                    tracing::info!(node = %id, native = %printed.native, pid = proc.pid(),
                        "node replaced");
                    e.backoff.started(Instant::now());
                    events.push(ManagerEvent::Replaced {
                        id: id.clone(),
                        address: printed.native.clone(),
                    });
                    e.proc = Some(proc);
                    e.printed = Some(printed);
                    e.state = NodeState::Running;
                }
                Err(error) => {
                    let wait = e.backoff.failed(Instant::now(), &self.config.restart);
                    e.retry_at = Some(Instant::now() + wait);
                    e.state = NodeState::Restarting;
                    tracing::warn!(node = %id, %error, retry_in = ?wait, "restart failed");
                    events.push(ManagerEvent::RestartFailed {
                        id,
                        error,
                        retry_in_ms: millis(wait),
                    });
                }
            }
        }
        Ok(events)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_are_the_prefix_and_digits_only() {
        assert_eq!(ordinal("mem", "mem3"), Some(3));
        assert_eq!(ordinal("mem", "mem12"), Some(12));
        assert_eq!(ordinal("mem", "mem"), None);
        assert_eq!(ordinal("mem", "mem-3"), None);
        assert_eq!(ordinal("mem", "mem+3"), None);
        assert_eq!(ordinal("mem", "disk3"), None);
        assert_eq!(ordinal("mem", "mem99999999999"), None);
    }

    #[test]
    fn ordinals_start_above_the_data_directories_present() {
        let root = tempfile::tempdir().unwrap();
        for d in ["mem2", "mem7", "disk1", "other", "mem", "memx"] {
            std::fs::create_dir(root.path().join(d)).unwrap();
        }
        let m = LocalManager::new(LocalConfig::new("latticekv", root.path())).unwrap();
        assert_eq!(m.lock().next, [8, 2]);
        assert_eq!(m.reserve(Tier::Memory).unwrap().0, "mem8");
        assert_eq!(m.reserve(Tier::Disk).unwrap().0, "disk2");
    }

    #[test]
    fn flags_the_manager_sets_are_refused_in_args() {
        let root = tempfile::tempdir().unwrap();
        for flag in ["--node-id", "--seeds=a:1", "--no-leave", "--data-dir"] {
            let mut c = LocalConfig::new("latticekv", root.path());
            c.args = vec!["--workers".into(), "2".into(), flag.into()];
            let err = LocalManager::new(c).err().expect("refused");
            assert!(
                err.to_string().contains(flag.split('=').next().unwrap()),
                "{err}"
            );
        }
        let mut c = LocalConfig::new("latticekv", root.path());
        c.disk_prefix = "mem".into();
        assert!(LocalManager::new(c).is_err());
    }

    #[test]
    fn a_node_gets_ephemeral_ports_its_data_dir_and_the_seeds() {
        let root = tempfile::tempdir().unwrap();
        let mut c = LocalConfig::new("latticekv", root.path());
        c.seeds = vec!["127.0.0.1:7700".into()];
        c.args = vec!["--workers".into(), "2".into()];
        let m = LocalManager::new(c).unwrap();
        let dir = root.path().join("disk1");
        let args = m.args("disk1", Tier::Disk, &dir);
        let expected = format!(
            "server --no-leave --node-id disk1 --tier disk --listen 127.0.0.1:0 --resp \
             127.0.0.1:0 --data-dir {} --seeds 127.0.0.1:7700 --workers 2",
            dir.display()
        );
        assert_eq!(args.join(" "), expected);
    }
}
