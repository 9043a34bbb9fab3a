//! `latticekv monitor`: the elasticity loop — poll every storage node's statistics, run the
//! policy ([`monitor::decide`]), carry out its actions.
//!
//! Each round (every `policy.period_ms`): fetch the topology from a node, ask every storage
//! member for its status (bounded by a timeout; a node that does not answer is left out of
//! the round), build the [`monitor::Snapshot`] (`monitor::collect`), decide, then set or
//! reset replication vectors through the admin API, and hand node additions and removals to
//! the cluster manager — or, without one, log them. `--dry-run` prints the actions as JSON
//! lines and changes nothing.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use client::Client;
use monitor::collect::{self, CollectConfig, NodeReport};
use monitor::manager::ClusterManager;
use monitor::{Action, PolicyConfig, PolicyState};

use crate::commands::Target;

/// `latticekv monitor`
#[derive(Args, Debug)]
pub struct MonitorArgs {
    #[command(flatten)]
    target: Target,
    /// Policy parameters (TOML, the `[policy]` keys of docs/elasticity.md); defaults
    /// otherwise.
    #[arg(long, env = "LATTICEKV_MONITOR_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Print the actions each round would take (JSON lines) and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Run this many rounds, then stop (0: until interrupted).
    #[arg(long, default_value_t = 0)]
    rounds: u64,
    /// Print each round's snapshot (JSON) before its actions.
    #[arg(long)]
    print_snapshot: bool,
    /// What one disk-tier node may store, in bytes, for the storage rule (0: what each disk
    /// node reports, its stored bytes plus its file system's free space beyond its reserve).
    #[arg(long, default_value_t = 0)]
    disk_capacity: u64,
    /// Who adds and removes nodes: `none` (node actions are logged, not taken), `local`
    /// (`latticekv server` child processes of this monitor, replaced when they die) or
    /// `kubernetes` (one StatefulSet per tier, in the client configuration's namespace or
    /// --namespace).
    #[arg(long, default_value = "none", value_parser = ["none", "local", "kubernetes"])]
    manager: String,
    /// `--manager local`: where the nodes' data directories go.
    #[arg(long, default_value = "latticekv-nodes")]
    data_root: std::path::PathBuf,
    /// `--manager local`: a flag for every node it starts (repeat it), e.g.
    /// `--server-arg=--workers=2`.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// `--manager kubernetes`: the namespace of the StatefulSets (default: the client
    /// configuration's).
    #[arg(long)]
    namespace: Option<String>,
}

/// The monitor's state between rounds.
pub struct Monitor {
    target: Target,
    policy: PolicyConfig,
    collect: CollectConfig,
    state: PolicyState,
    seed: Option<Client>,
    nodes: HashMap<String, Client>,
    start: Instant,
    dry_run: bool,
    /// The latest actions (at most [`REPORTED_ACTIONS`]), as reported to the nodes.
    recent: VecDeque<wire::pb::policy_report::Action>,
    rounds: u64,
    manager: Option<Box<dyn ClusterManager>>,
    /// Totals since start, and the last round's observations, for the nodes' metrics.
    totals: Totals,
    /// Keys whose explicit vector this monitor set (the others are an operator's and the
    /// policy leaves them alone). Forgotten on restart: see docs/elasticity.md.
    managed: HashSet<Vec<u8>>,
}

/// What the monitor reports to the nodes for their metrics (`PolicyReport`'s totals).
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    set_replication: u64,
    reset_replication: u64,
    add_nodes: u64,
    remove_node: u64,
    failed: u64,
    nodes_requested: u64,
    nodes_removed: u64,
    observed: monitor::Observed,
}

impl Totals {
    /// Counts `action`: `done` if it was carried out, `failed` if carrying it out failed
    /// (neither: a dry run).
    fn count(&mut self, action: &Action, done: bool, failed: bool) {
        match action {
            Action::SetReplication { .. } => self.set_replication += 1,
            Action::ResetReplication { .. } => self.reset_replication += 1,
            Action::AddNodes { count, .. } => {
                self.add_nodes += 1;
                if done {
                    self.nodes_requested += u64::from(*count);
                }
            }
            Action::RemoveNode { .. } => {
                self.remove_node += 1;
                if done {
                    self.nodes_removed += 1;
                }
            }
        }
        if failed {
            self.failed += 1;
        }
    }
}

/// Actions a report to the nodes carries.
const REPORTED_ACTIONS: usize = 32;

/// What one round saw and did.
pub struct Round {
    /// The snapshot the policy judged.
    pub snapshot: monitor::Snapshot,
    /// Its actions, each with the error that stopped it, if any.
    pub actions: Vec<(Action, Option<String>)>,
}

/// How long a node has to answer a status request.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

impl Monitor {
    /// A monitor of the cluster `target` belongs to.
    pub fn new(
        target: Target,
        policy: PolicyConfig,
        collect: CollectConfig,
        dry_run: bool,
    ) -> Monitor {
        Monitor {
            target,
            policy,
            collect,
            state: PolicyState::new(),
            seed: None,
            nodes: HashMap::new(),
            start: Instant::now(),
            dry_run,
            recent: VecDeque::new(),
            rounds: 0,
            manager: None,
            totals: Totals::default(),
            managed: HashSet::new(),
        }
    }

    /// Adds and removes nodes through `manager` (else node actions fail with a message).
    pub fn with_manager(mut self, manager: Box<dyn ClusterManager>) -> Monitor {
        self.manager = Some(manager);
        self
    }

    /// The policy's period.
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.policy.period_ms.max(100))
    }

    async fn seed(&mut self) -> Result<&Client> {
        if self.seed.is_none() {
            let c = Client::connect_with(&self.target.addr, self.target.options()?)
                .await
                .with_context(|| format!("connecting to {}", self.target.addr))?;
            self.seed = Some(c);
        }
        Ok(self.seed.as_ref().expect("connected above"))
    }

    async fn status_of(&mut self, front: &str) -> Option<wire::pb::Status> {
        if !self.nodes.contains_key(front) {
            let options = self.target.options().ok()?;
            let c = tokio::time::timeout(STATUS_TIMEOUT, Client::connect_with(front, options))
                .await
                .ok()?
                .ok()?;
            self.nodes.insert(front.to_string(), c);
        }
        let c = self.nodes.get(front)?;
        match tokio::time::timeout(STATUS_TIMEOUT, c.status()).await {
            Ok(Ok(s)) => Some(s),
            _ => {
                self.nodes.remove(front);
                None
            }
        }
    }

    /// One round: poll, decide, act.
    pub async fn round(&mut self) -> Result<Round> {
        if let Some(m) = &self.manager {
            match m.check().await {
                Ok(events) => {
                    for e in events {
                        tracing::warn!(event = ?e, "cluster manager");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cluster manager check failed"),
            }
        }
        let topology = match self.seed().await?.refresh_topology().await {
            Ok(t) => t,
            Err(e) => {
                self.seed = None;
                return Err(e).context("fetching the topology");
            }
        };
        let mut reports = Vec::new();
        for member in &topology.members {
            if collect::member_tier(member).is_none()
                || member.status == wire::pb::NodeStatus::Left as i32
            {
                continue;
            }
            let status = if member.status == wire::pb::NodeStatus::Dead as i32 {
                None
            } else {
                self.status_of(&member.front).await
            };
            reports.push(NodeReport {
                member: member.clone(),
                status,
            });
        }
        let now = self.start.elapsed().as_millis() as u64;
        let managed = &self.managed;
        let mut snapshot = collect::snapshot(now, &topology, &reports, self.collect, &|k| {
            managed.contains(k)
        });
        // A manager removes only the nodes it manages (not, say, the seed started by hand):
        // the policy picks among those. If it cannot list them, every node stays a
        // candidate and a removal it cannot do fails as before.
        if let Some(m) = &self.manager {
            match m.nodes().await {
                Ok(nodes) => {
                    let ids: HashSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
                    for n in &mut snapshot.nodes {
                        n.removable = ids.contains(n.id.as_str());
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cluster manager cannot list its nodes"),
            }
        }
        self.totals.observed = monitor::observe(&snapshot, &self.policy);
        let actions = monitor::decide(&snapshot, &self.policy, &mut self.state);
        let mut done = Vec::with_capacity(actions.len());
        for action in actions {
            let error = if self.dry_run {
                None
            } else {
                self.act(&action).await.err().map(|e| format!("{e:#}"))
            };
            if let Some(e) = &error {
                if action.is_elastic() && self.manager.is_none() {
                    tracing::info!(action = ?action, "policy recommends (no cluster manager)");
                } else {
                    tracing::warn!(action = ?action, error = %e, "policy action failed");
                }
            } else {
                tracing::info!(action = ?action, "policy action");
            }
            // A dry run carries nothing out: nodes are neither requested nor removed.
            let carried_out = error.is_none() && !self.dry_run;
            self.totals.count(&action, carried_out, error.is_some());
            done.push((action, error));
        }
        self.rounds += 1;
        self.report(&done).await;
        Ok(Round {
            snapshot,
            actions: done,
        })
    }

    /// Tells every node polled this round what the monitor did lately (their status shows
    /// it). A node that does not take it is skipped: the report is informational.
    async fn report(&mut self, done: &[(Action, Option<String>)]) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        for (action, error) in done {
            self.recent
                .push_back(action_to_pb(action, error.as_deref(), now));
            if self.recent.len() > REPORTED_ACTIONS {
                self.recent.pop_front();
            }
        }
        let report = wire::pb::PolicyReport {
            sent_ms: now,
            rounds: self.rounds,
            actions: self.recent.iter().cloned().collect(),
            dry_run: self.dry_run,
            set_replication_total: self.totals.set_replication,
            reset_replication_total: self.totals.reset_replication,
            add_nodes_total: self.totals.add_nodes,
            remove_node_total: self.totals.remove_node,
            failed_actions_total: self.totals.failed,
            nodes_requested_total: self.totals.nodes_requested,
            nodes_removed_total: self.totals.nodes_removed,
            hot_keys: self.totals.observed.hot_keys,
            observed_latency_us: self.totals.observed.l_obs_us,
            latency_objective_us: self.totals.observed.l_obj_us,
        };
        for c in self.nodes.values() {
            let _ = tokio::time::timeout(STATUS_TIMEOUT, c.policy_report(report.clone())).await;
        }
    }

    async fn act(&mut self, action: &Action) -> Result<()> {
        let seed = self.seed().await?;
        match action {
            Action::SetReplication { key, vector, .. } => {
                seed.set_policy_vector(key, (*vector).into()).await?;
                self.managed.insert(key.clone());
            }
            Action::ResetReplication { key, .. } => {
                seed.reset_vector(key).await?;
                self.managed.remove(key);
            }
            Action::AddNodes { tier, count, .. } => {
                let Some(m) = &self.manager else {
                    anyhow::bail!("no cluster manager (--manager local|kubernetes) to add nodes");
                };
                let ids = m.add(*tier, *count).await?;
                tracing::info!(?ids, "nodes added");
            }
            Action::RemoveNode { tier, node_id, .. } => {
                let Some(m) = &self.manager else {
                    anyhow::bail!(
                        "no cluster manager (--manager local|kubernetes) to remove nodes"
                    );
                };
                let id = m.remove(*tier, node_id).await?;
                tracing::info!(%id, "node removed");
            }
        }
        Ok(())
    }
}

/// An action as the nodes keep it (texts cut to what a node accepts).
fn action_to_pb(action: &Action, error: Option<&str>, now: u64) -> wire::pb::policy_report::Action {
    let cut = |s: &str| -> String {
        let mut end = s.len().min(500);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_string()
    };
    let mut a = wire::pb::policy_report::Action {
        at_ms: now,
        reason: cut(action.reason()),
        error: cut(error.unwrap_or_default()),
        ..Default::default()
    };
    match action {
        Action::SetReplication { key, vector, .. } => {
            a.kind = "set_replication".into();
            a.key = bytes::Bytes::copy_from_slice(&key[..key.len().min(256)]);
            a.memory_global = vector.memory.global;
            a.memory_local = vector.memory.local;
            a.disk_global = vector.disk.global;
            a.disk_local = vector.disk.local;
        }
        Action::ResetReplication { key, .. } => {
            a.kind = "reset_replication".into();
            a.key = bytes::Bytes::copy_from_slice(&key[..key.len().min(256)]);
        }
        Action::AddNodes { tier, count, .. } => {
            a.kind = "add_nodes".into();
            a.tier = tier_name(*tier).into();
            a.count = *count;
        }
        Action::RemoveNode { tier, node_id, .. } => {
            a.kind = "remove_node".into();
            a.tier = tier_name(*tier).into();
            a.node_id = cut(node_id);
        }
    }
    a
}

fn tier_name(t: monitor::Tier) -> &'static str {
    match t {
        monitor::Tier::Memory => "memory",
        monitor::Tier::Disk => "disk",
    }
}

/// Loads the policy configuration (defaults without a file).
pub fn load_policy(path: Option<&std::path::Path>) -> Result<PolicyConfig> {
    let policy: PolicyConfig = match path {
        None => PolicyConfig::default(),
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("parsing {}", p.display()))?
        }
    };
    policy.validate().context("invalid policy configuration")?;
    Ok(policy)
}

/// The cluster manager `--manager` names.
async fn manager(args: &MonitorArgs) -> Result<Option<Box<dyn ClusterManager>>> {
    let admin = monitor::manager::AdminAccess {
        credentials: args.target.credentials(),
        tls: args.target.options()?.tls,
    };
    match args.manager.as_str() {
        "local" => {
            let binary = std::env::current_exe().context("locating the latticekv binary")?;
            let mut config = monitor::manager::local::LocalConfig::new(binary, &args.data_root);
            config.seeds = vec![args.target.addr.clone()];
            config.args = args.server_args.clone();
            config.admin = admin;
            let m = monitor::manager::local::LocalManager::new(config)?;
            Ok(Some(Box::new(m)))
        }
        "kubernetes" => {
            let m = monitor::manager::kubernetes::KubernetesManager::connect(
                args.namespace.clone(),
                admin,
            )
            .await
            .context("connecting to the Kubernetes API (in-cluster or ~/.kube/config)")?;
            Ok(Some(Box::new(m)))
        }
        _ => Ok(None),
    }
}

/// The monitor embedded in `latticekv local`: rounds forever against the node at `addr`,
/// without a cluster manager (node additions are reported, not made).
pub async fn embedded(addr: String, policy: PolicyConfig) {
    let target = Target::local(addr);
    let mut m = Monitor::new(target, policy, CollectConfig::default(), false);
    let mut ticker = tokio::time::interval(m.period());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(e) = m.round().await {
            tracing::debug!(error = %format!("{e:#}"), "monitor round failed");
        }
    }
}

/// `latticekv monitor`.
pub async fn run(args: MonitorArgs) -> Result<i32> {
    let policy = load_policy(args.config.as_deref())?;
    let collect = CollectConfig {
        disk_capacity_bytes: args.disk_capacity,
    };
    let manager = manager(&args).await?;
    let mut m = Monitor::new(args.target, policy, collect, args.dry_run);
    if let Some(manager) = manager {
        m = m.with_manager(manager);
    }
    let mut ticker = tokio::time::interval(m.period());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rounds = 0u64;
    loop {
        ticker.tick().await;
        match m.round().await {
            Ok(round) => {
                if args.print_snapshot {
                    println!("{}", serde_json::to_string(&round.snapshot)?);
                }
                for (action, error) in &round.actions {
                    let mut line = serde_json::to_value(action)?;
                    if let (Some(e), Some(obj)) = (error, line.as_object_mut()) {
                        obj.insert("error".into(), e.clone().into());
                    }
                    println!("{line}");
                }
            }
            Err(e) => eprintln!("monitor round failed: {e:#}"),
        }
        rounds += 1;
        if args.rounds > 0 && rounds >= args.rounds {
            return Ok(0);
        }
    }
}
