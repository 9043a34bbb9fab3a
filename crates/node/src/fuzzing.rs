//! Entry points for the fuzz targets (`crates/fuzz`). Not an API: hidden from the docs, it
//! changes with the code it reaches.
//!
//! The targets drive the node's real code without sockets or threads:
//! - [`serve_client`]: a client connection's bytes through the real protocol codec (native
//!   or RESP) of a two-worker node held in memory — its workers, cores and mesh as the node
//!   runs them, on one thread, with a manual clock. What is missing: the ports, the log (no
//!   data directory) and the agent's thread (requests for the agent fail as on a stopping
//!   node).
//! - [`Agent`]: the cluster agent's decisions, fed the `SyncCluster` exchanges the peer port
//!   hands it, publishing the views a node's workers would switch to.

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use placement::{node_key, Replica};
use tokio::sync::watch;
use tokio::task::LocalSet;
use wire::pb;

use crate::auth::{sha256_hex, Permission, UserConfig};
use crate::clock::{Clock, ManualClock};
use crate::cluster::agent::{self, AgentConfig, OfflineAgent, Snapshot};
use crate::cluster::membership::DetectorConfig;
use crate::config::{Faults, NodeConfig};
use crate::core::Core;
use crate::driver::conns::ConnectionLimit;
use crate::driver::mesh::Mesh;
use crate::driver::shared::{PublishedAddresses, Shared};
use crate::driver::worker::Worker;
use crate::front::pipeline::{run_batch, Codec, Replies};
use crate::front::{native, resp};
use crate::shard::{Shard, ShardConfig};
use crate::view::ViewState;

/// Wall-clock time at which the in-memory nodes start (ms since the Unix epoch).
pub const START_MS: u64 = 1_700_000_000_000;

/// The node id of the in-memory nodes.
pub const NODE_ID: &str = "fuzz";

/// Users of an in-memory node started `with_users`: (name, password, permissions, keys).
pub const USERS: [(&str, &str, &[Permission], &[&str]); 2] = [
    (
        "admin",
        "admin-pass",
        &[Permission::Read, Permission::Write, Permission::Admin],
        &["*"],
    ),
    ("app", "app-pass", &[Permission::Read], &["app:*"]),
];

/// Which client port a session is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    /// The shared native front port (requests for other workers' keys are forwarded).
    Front,
    /// A worker's own native port (requests for other workers' keys are redirected).
    Own,
    /// The RESP port.
    Resp,
}

/// What the node wrote back on a connection.
#[derive(Clone, Debug, Default)]
pub struct Session {
    /// Every byte written to the client, in order.
    pub out: Vec<u8>,
    /// Requests run.
    pub requests: usize,
    /// The node closed the connection (protocol error, `QUIT`).
    pub closed: bool,
}

/// Ticks of the manual clock after which a batch still unanswered is a hang.
const MAX_TICKS: usize = 10_000;

/// The configuration of an in-memory node.
pub fn config(with_users: bool) -> NodeConfig {
    let mut config = NodeConfig {
        node_id: NODE_ID.into(),
        workers: 2,
        vnodes: 16,
        ..NodeConfig::default()
    };
    config.limits.memory_budget = 256 << 20;
    if with_users {
        config.users = USERS
            .iter()
            .map(|(name, password, permissions, keys)| UserConfig {
                name: (*name).into(),
                password_sha256: sha256_hex(password.as_bytes()),
                permissions: permissions.to_vec(),
                keys: keys.iter().map(|k| (*k).to_string()).collect(),
            })
            .collect();
    }
    config
}

/// Serves one client connection on a fresh two-worker node held in memory: `reads` are
/// the chunks the client's bytes arrive in. Runs the connection pipeline's batches as a
/// connection on worker 0 would, ticking the workers' cores (manual clock) while a batch
/// waits for its replies.
///
/// # Panics
/// If a batch is still unanswered after `MAX_TICKS` ticks (a hang), or on any bug the
/// input reaches.
pub fn serve_client(port: Port, with_users: bool, reads: &[&[u8]]) -> Session {
    thread_local! {
        static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
    }
    let config = config(with_users);
    RT.with(|rt| {
        let local = LocalSet::new();
        let session = local.block_on(rt, serve_in_memory(config, port, reads));
        // Dropping the set drops the workers' inbox tasks, and with them the workers.
        drop(local);
        session
    })
}

async fn serve_in_memory(config: NodeConfig, port: Port, reads: &[&[u8]]) -> Session {
    let users = config
        .validate()
        .expect("the fuzz node's configuration is valid");
    let workers = config.worker_count();
    let clock = Arc::new(ManualClock::new(START_MS));
    let view = Arc::new(ViewState::single_node(
        NODE_ID,
        workers,
        config.vnodes,
        config.default_vector(),
    ));
    let (shared, _publish, inboxes) = in_memory_shared(&config, users, view.clone());
    crate::shard::install_script_runner(crate::front::resp::scripting::run);
    let core_config = crate::server::core_config(&config);
    let budget = (config.limits.memory_budget_bytes() / workers as u64) as usize;
    let ws: Vec<_> = inboxes
        .into_iter()
        .enumerate()
        .map(|(i, inbox)| {
            let mut shard = shard(&config, i as u32, budget, view.clone(), clock.clone());
            // `CONFIG SET notify-keyspace-events` in an input turns notifications on.
            shard.set_keyspace_flags(shared.pubsub.keyspace.clone());
            let core = Core::new(shard, core_config.clone(), 100 + i as u64);
            let w = Worker::in_memory(shared.clone(), i as u32, core, inbox);
            w.set_key_event_sink(crate::pubsub::events::publish);
            w
        })
        .collect();
    let w = ws[0].clone();
    match port {
        Port::Front => serve_reads(&ws, &clock, native::Native::new(&w, true, false), reads).await,
        Port::Own => serve_reads(&ws, &clock, native::Native::new(&w, false, false), reads).await,
        Port::Resp => serve_reads(&ws, &clock, resp::Resp::new(&w), reads).await,
    }
}

/// What the workers of an in-memory node share (no ports, no agent thread, no TLS), the
/// sender of its snapshots (starting at `view`), and its workers' inboxes.
pub(crate) fn in_memory_shared(
    config: &NodeConfig,
    users: crate::auth::Users,
    view: Arc<ViewState>,
) -> (
    Arc<Shared>,
    watch::Sender<Arc<Snapshot>>,
    Vec<tokio::sync::mpsc::Receiver<crate::driver::worker::WorkerMsg>>,
) {
    let workers = config.worker_count();
    let (publish, snapshots) = watch::channel(Arc::new(Snapshot {
        view,
        members: Vec::new(),
    }));
    let (stop, shutdown) = watch::channel(false);
    let (leaving, _) = watch::channel(false);
    let (mesh, inboxes) = Mesh::new(workers);
    let shared = Arc::new(Shared {
        config: config.clone(),
        users: Arc::new(users),
        tls: None,
        mesh,
        published: PublishedAddresses {
            front: "fuzz:7700".into(),
            resp: "fuzz:6380".into(),
            workers: (0..workers).map(|i| format!("fuzz:{}", 7701 + i)).collect(),
            peer: "fuzz:17700".into(),
        },
        resp_port: 6380,
        started: Instant::now(),
        connections: ConnectionLimit::new(
            config.limits.max_connections,
            config.limits.admin_connections,
        ),
        shutdown,
        stop,
        leaving,
        faults: Faults::default(),
        agent: agent::Agent::detached(),
        snapshots,
        policy: tokio::sync::watch::Sender::new(None),
        backing: None,
        pubsub: Default::default(),
        clients: Default::default(),
        scripts: Default::default(),
        metrics_sources: Default::default(),
    });
    (shared, publish, inboxes)
}

/// Worker `index`'s shard, as `Node::start` makes it.
fn shard(
    config: &NodeConfig,
    index: u32,
    budget: usize,
    view: Arc<ViewState>,
    clock: Arc<ManualClock>,
) -> Shard {
    Shard::new(
        ShardConfig {
            me: Replica {
                node: node_key(&config.node_id),
                worker: index,
            },
            limits: config.limits,
            memory_budget: budget,
            max_changeset_keys: crate::server::MAX_CHANGESET_KEYS,
            settle_ms: config.cluster.settle_ms,
            tombstone_memory_ms: config.tombstone_grace_secs.saturating_mul(1000),
            disk_copy: config.disk_copy.unwrap_or_default(),
        },
        view,
        u64::from(index),
        clock,
    )
}

/// Opens the write-ahead log in `dir` as a memory-tier worker of the in-memory node does
/// at start: every record replayed into a fresh shard (`driver::journal::open_wal`).
/// Returns the log, what recovery found, and the keys the shard then stores.
pub fn open_wal(
    dir: &std::path::Path,
    options: store::wal::WalOptions,
) -> Result<(store::wal::Wal, store::wal::Recovery, u64), store::wal::WalError> {
    let config = config(false);
    let view = Arc::new(ViewState::single_node(
        NODE_ID,
        1,
        config.vnodes,
        config.default_vector(),
    ));
    let mut shard = shard(
        &config,
        0,
        64 << 20,
        view,
        Arc::new(ManualClock::new(START_MS)),
    );
    shard.enable_journal();
    let (log, recovery) = crate::driver::journal::open_wal(dir, options, &mut shard)?;
    Ok((log, recovery, shard.stats().stored_keys))
}

/// The connection pipeline's loop (`pipeline::serve`) over `reads` instead of a socket.
async fn serve_reads<C: Codec>(
    ws: &[std::rc::Rc<Worker>],
    clock: &ManualClock,
    mut codec: C,
    reads: &[&[u8]],
) -> Session {
    let w = &ws[0];
    let max_batch_reply = w.shared.config.limits.max_reply_bytes.max(1);
    let mut inbuf = BytesMut::new();
    let mut replies = Replies::default();
    let mut session = Session::default();
    for read in reads {
        inbuf.extend_from_slice(read);
        loop {
            let batch = run_batch(
                w,
                &mut codec,
                &mut inbuf,
                &mut replies,
                max_batch_reply,
                std::time::Instant::now(),
            );
            let batch = drive(ws, clock, batch).await;
            session.requests += batch.requests;
            session.out.append(&mut replies.out);
            if batch.close || codec.quit() {
                session.closed = true;
                return session;
            }
            if !batch.full {
                break;
            }
        }
    }
    session
}

/// Runs `fut` while ticking the workers' cores: whenever it is still waiting once the other
/// tasks had their turn, the clock moves to the earliest core deadline and every core ticks.
async fn drive<T>(
    ws: &[std::rc::Rc<Worker>],
    clock: &ManualClock,
    fut: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(fut);
    for _ in 0..MAX_TICKS {
        tokio::select! {
            biased;
            out = &mut fut => return out,
            _ = yield_a_while() => {}
        }
        let next = ws
            .iter()
            .map(|w| w.core().next_deadline())
            .min()
            .unwrap_or(u64::MAX);
        let now = clock.mono_ms();
        clock.advance(next.saturating_sub(now).clamp(1, 60_000));
        for w in ws {
            w.with_core(Core::tick);
        }
    }
    panic!("a batch of requests was not answered after {MAX_TICKS} ticks of the clock");
}

/// Lets every other task of the set run a few times.
async fn yield_a_while() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

/// The [`Agent`]'s `max_replication_entries`: small, so short inputs reach it.
pub const AGENT_MAX_REPLICATION_ENTRIES: usize = 16;

/// A node's cluster agent without its thread: what the `SyncCluster` exchanges arriving on
/// its peer port do to its membership, replication table and views.
pub struct Agent {
    inner: OfflineAgent,
    clock: Arc<ManualClock>,
}

impl Agent {
    /// The agent of a storage node `fuzz` alone, as at start.
    pub fn new() -> Agent {
        let config = NodeConfig::default();
        let clock = Arc::new(ManualClock::new(START_MS));
        let inner = OfflineAgent::new(
            AgentConfig {
                cluster_secret: None,
                tls: None,
                node_id: NODE_ID.into(),
                desc: agent::storage_description(
                    placement::Tier::Memory,
                    "fuzz:7700".into(),
                    "fuzz:6380".into(),
                    vec!["fuzz:7701".into(), "fuzz:7702".into()],
                    16,
                    "fuzz:17700".into(),
                ),
                seeds: Vec::new(),
                gossip_interval: std::time::Duration::from_millis(100),
                detector: DetectorConfig {
                    suspect_after_ms: config.cluster.suspect_after_ms,
                    dead_after_ms: config.cluster.failure_timeout_ms,
                },
                fanout: 3,
                default: config.default_vector(),
                max_replication_entries: AGENT_MAX_REPLICATION_ENTRIES,
            },
            clock.clone(),
            7,
        );
        Agent { inner, clock }
    }

    /// A peer's `SyncCluster` push; returns the agent's answer.
    pub fn on_sync(&mut self, state: &pb::ClusterState) -> pb::ClusterState {
        self.inner.on_sync(state)
    }

    /// `ms` pass, then a gossip round (heartbeat, failure detection, a new snapshot).
    pub fn round(&mut self, ms: u64) {
        self.clock.advance(ms);
        self.inner.round();
    }

    /// The view the node's workers would route by now.
    pub fn view(&self) -> Arc<ViewState> {
        self.inner.snapshot().view.clone()
    }

    /// The members it would report (`Topology`, status), as on the wire.
    pub fn members(&self) -> Vec<pb::Member> {
        self.inner.snapshot().members.clone()
    }

    /// Its wall clock (ms since the Unix epoch).
    pub fn now_ms(&self) -> u64 {
        self.clock.wall_ms()
    }
}

impl Default for Agent {
    fn default() -> Self {
        Agent::new()
    }
}

/// The replica core's settings a node derives from `config` (as `Node::start` does).
pub fn core_config(config: &NodeConfig) -> crate::core::CoreConfig {
    crate::server::core_config(config)
}

/// The replica cores of the in-memory node's `workers` workers (as `Node::start` makes
/// them), routing by `view`, on `clock`.
pub fn cores(workers: usize, view: Arc<ViewState>, clock: Arc<ManualClock>) -> Vec<Core> {
    let config = config(false);
    let core_config = crate::server::core_config(&config);
    (0..workers)
        .map(|i| {
            let shard = shard(&config, i as u32, 64 << 20, view.clone(), clock.clone());
            Core::new(shard, core_config.clone(), 100 + i as u64)
        })
        .collect()
}

/// Starts what a node derives from an accepted `config` without binding ports: the cores
/// of (at most four of) its workers and its agent, on a manual clock, and runs them for a
/// while — a write, a read, ticks at each deadline, gossip rounds.
pub fn run_config(config: &NodeConfig) {
    let workers = config.worker_count().min(4);
    let clock = Arc::new(ManualClock::new(START_MS));
    let view = Arc::new(ViewState::single_node(
        &config.node_id,
        workers,
        config.vnodes,
        config.default_vector(),
    ));
    let core_config = crate::server::core_config(config);
    let budget = (config.limits.memory_budget_bytes() / config.worker_count() as u64) as usize;
    let mut cores: Vec<Core> = (0..workers)
        .map(|i| {
            let shard = shard(config, i as u32, budget, view.clone(), clock.clone());
            Core::new(shard, core_config.clone(), i as u64)
        })
        .collect();
    for core in &mut cores {
        let key = bytes::Bytes::from_static(b"k");
        let write = crate::op::Op::Assign {
            key: key.clone(),
            value: bytes::Bytes::from_static(b"v"),
            condition: crate::op::Condition::Always,
        };
        let _ = core.submit(
            vec![write],
            crate::ack::Ack::MERGED,
            crate::core::Routing::Forward,
        );
        let _ = core.submit(
            vec![crate::op::Op::Get { key }],
            crate::ack::Ack::MERGED,
            crate::core::Routing::Forward,
        );
    }
    const DAY_MS: u64 = 24 * 3600 * 1000;
    for _ in 0..8 {
        let next = cores
            .iter()
            .map(Core::next_deadline)
            .min()
            .unwrap_or(u64::MAX);
        let now = clock.mono_ms();
        clock.advance(next.saturating_sub(now).clamp(1, DAY_MS));
        for core in &mut cores {
            core.tick();
            let _ = core.take_effects();
        }
    }
    let cluster = &config.cluster;
    let published = |a: std::net::SocketAddr| config.published(a).unwrap_or_default();
    let mut agent = OfflineAgent::new(
        AgentConfig::new(
            config,
            agent::storage_description(
                config.tier.tier(),
                published(config.listen),
                published(config.resp),
                view.view
                    .nodes()
                    .flat_map(|(_, n)| n.workers.clone())
                    .collect(),
                config.vnodes,
                published(config.peer_addr()),
            ),
            None,
        ),
        clock.clone(),
        1,
    );
    for _ in 0..4 {
        clock.advance(cluster.gossip_interval_ms.clamp(10, DAY_MS));
        agent.round();
    }
}
