//! Starting and stopping a node.
//!
//! [`Node::start`] binds every port first (so a port in use is reported before anything
//! runs), replays each worker's log, then starts the cluster agent and one thread per
//! worker, each driving a replica core, with the accept loops on them: every worker's own
//! port, and on worker 0 the shared front, RESP and peer ports. [`Node::shutdown`] asks
//! every worker to stop: listeners close, connections finish the batch they are on,
//! workers send their last gossip, and [`Node::join`] returns when all threads have
//! exited.

use std::fs::{File, OpenOptions};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use placement::{node_key, Replica};
use store::{DiskDb, DiskOptions};
use tokio::sync::watch;

use crate::clock::SystemClock;
use crate::cluster::agent::{self, Agent, AgentConfig};
use crate::config::{Faults, NodeConfig, NodeTier};
use crate::core::{Core, CoreConfig};
use crate::driver::conns::ConnectionLimit;
use crate::driver::journal::{open_wal_reporting, JournalSetup, LsmSyncer};
use crate::driver::mesh::Mesh;
use crate::driver::replay::{self, ReplayProgress};
use crate::driver::shared::Shared;
use crate::driver::thread::{self as worker_thread, Service, WorkerSetup};
use crate::driver::worker::{Worker, WorkerMsg};
use crate::front::{self, Protocol};
use crate::peer::listen::{self, Routes};
use crate::shard::{Shard, ShardConfig};
use crate::tls::NodeTls;

pub use crate::driver::shared::PublishedAddresses;

/// Most changeset keys before a worker gossips early.
pub(crate) const MAX_CHANGESET_KEYS: usize = 65_536;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A port could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The data directory could not be created or locked.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Another process holds the data directory.
    #[error("data directory {0} is in use by another latticekv process")]
    DataDirLocked(PathBuf),
    /// A worker thread could not be started.
    #[error("cannot start a worker thread: {0}")]
    Thread(std::io::Error),
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A worker's write-ahead log could not be opened or recovered.
    #[error("write-ahead log {path}: {source}")]
    Wal {
        /// The log's directory.
        path: PathBuf,
        /// The cause.
        source: store::wal::WalError,
    },
    /// The disk tier's engine could not be opened or recovered.
    #[error("disk engine: {0}")]
    Disk(store::StoreError),
    /// The advertised host is not usable.
    #[error("invalid configuration: {0}")]
    Advertise(#[from] crate::config::AdvertiseError),
}

/// The addresses a running node listens on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddresses {
    /// Native front port (forwards to owners).
    pub front: SocketAddr,
    /// RESP port.
    pub resp: SocketAddr,
    /// Native port of each worker.
    pub workers: Vec<SocketAddr>,
    /// Peer port (other nodes).
    pub peer: SocketAddr,
    /// HTTP port (metrics, health), if the node has one.
    pub http: Option<SocketAddr>,
}

/// A running node.
pub struct Node {
    addresses: NodeAddresses,
    published: PublishedAddresses,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
    agent_thread: Option<JoinHandle<()>>,
    /// Periodic `fdatasync` of a disk-tier node's journal.
    fsync_thread: Option<JoinHandle<()>>,
    /// Held (locked) for the node's lifetime.
    _data_lock: Option<File>,
    /// The backing store's runtime (stopped when the node is dropped, after its workers).
    _backing: Option<crate::driver::backing::BackingRuntime>,
}

fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    let listener = TcpListener::bind(addr).map_err(|source| StartError::Bind { addr, source })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok(listener)
}

fn local_addr(l: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, StartError> {
    l.local_addr()
        .map_err(|source| StartError::Bind { addr, source })
}

fn lock_data_dir(path: &PathBuf) -> Result<File, StartError> {
    let io = |source| StartError::DataDir {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(path).map_err(io)?;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.join("LOCK"))
        .map_err(io)?;
    // SAFETY: flock on a file descriptor we own; failure is reported through the return value.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(StartError::DataDirLocked(path.clone()));
    }
    Ok(file)
}

/// Pins the calling thread to `cpu` (best effort).
fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            tracing::warn!(cpu, "could not pin worker thread");
        }
    }
}

/// The replica core's settings from a node's configuration.
pub(crate) fn core_config(config: &NodeConfig) -> CoreConfig {
    CoreConfig {
        gossip_period_ms: config.gossip_period_ms.max(1),
        anti_entropy_period_ms: config.cluster.anti_entropy_period().as_millis() as u64,
        tombstone_grace_ms: config.tombstone_grace_secs.saturating_mul(1000),
        max_reply_bytes: config.limits.max_reply_bytes,
        stats: config.stats.clone(),
        default_ack: crate::ack::Ack {
            replicas: config.ack_replicas as usize,
            durable: config.ack == crate::ack::AckLevel::Durable,
            quiet: false,
        },
        ..CoreConfig::default()
    }
}

/// Where accepted peer connections go on a storage node.
struct NodeRoutes {
    node_id: String,
    secret: Option<String>,
    mesh: Mesh<WorkerMsg>,
    agent: Agent,
}

impl Routes for NodeRoutes {
    fn node_id(&self) -> &str {
        &self.node_id
    }

    fn workers(&self) -> u32 {
        self.mesh.len() as u32
    }

    fn cluster_secret(&self) -> Option<&str> {
        self.secret.as_deref()
    }

    fn to_worker(&self, worker: u32, stream: tls::Detached, from: Replica) {
        let serve = WorkerMsg::Run(Box::new(move |w: &Rc<Worker>| {
            tokio::task::spawn_local(crate::driver::peer_conn::serve(w.clone(), stream, from));
        }));
        if self.mesh.try_send(worker, serve).is_err() {
            tracing::debug!(worker, "worker inbox full: a peer connection is dropped");
        }
    }

    fn to_agent(&self, stream: tls::Detached) {
        self.agent.serve(stream);
    }
}

impl Node {
    /// Binds the node's ports and starts its workers.
    pub fn start(config: NodeConfig) -> Result<Node, StartError> {
        Node::start_reporting(config, &())
    }

    /// [`Node::start`], telling `progress` how the replay of the write-ahead logs advances
    /// (a memory-tier node with a data directory).
    pub fn start_reporting(
        config: NodeConfig,
        progress: &dyn ReplayProgress,
    ) -> Result<Node, StartError> {
        let users = config
            .validate()
            .map_err(|e| StartError::Config(e.to_string()))?;
        let tls =
            NodeTls::from_config(&config.tls).map_err(|e| StartError::Config(e.to_string()))?;
        let workers = config.worker_count();
        let faults = Faults::from_env();
        let data_lock = config.data_dir.as_ref().map(lock_data_dir).transpose()?;
        let disk = match (config.tier, &config.data_dir) {
            (NodeTier::Memory, _) => None,
            (NodeTier::Disk, None) => {
                return Err(StartError::Config(
                    "a disk-tier node needs a data directory (data_dir / --data-dir)".into(),
                ))
            }
            (NodeTier::Disk, Some(dir)) => {
                let options = DiskOptions {
                    cache_bytes: config.disk.cache_bytes,
                    background_threads: 2,
                    memtable_bytes: config.disk.memtable_bytes.max(1 << 20),
                };
                // Opened from a thread at a lower priority: the LSM's flush and compaction
                // threads, started by the open, inherit it (`priority`).
                let lsm = dir.join("lsm");
                let db = crate::priority::lowered(|| DiskDb::open(&lsm, &options))
                    .map_err(StartError::Thread)?
                    .map_err(StartError::Disk)?;
                Some(db)
            }
        };

        let front = bind(config.listen)?;
        let front_addr = local_addr(&front, config.listen)?;
        let resp = bind(config.resp)?;
        let resp_addr = local_addr(&resp, config.resp)?;
        let peer = bind(config.peer_addr())?;
        let peer_addr = local_addr(&peer, config.peer_addr())?;
        let http = config.http.map(bind).transpose()?;
        let http_addr = match (&http, config.http) {
            (Some(l), Some(a)) => Some(local_addr(l, a)?),
            _ => None,
        };
        let mut worker_listeners = Vec::with_capacity(workers);
        let mut worker_addrs = Vec::with_capacity(workers);
        for i in 0..workers {
            let addr = match config.worker_listen {
                Some(base) => offset(base, i as u16),
                None if config.listen.port() == 0 => SocketAddr::new(config.listen.ip(), 0),
                None => offset(front_addr, i as u16 + 1),
            };
            let l = bind(addr)?;
            worker_addrs.push(local_addr(&l, addr)?);
            worker_listeners.push(l);
        }

        let publish = |bound: SocketAddr| config.published(bound).map_err(StartError::Advertise);
        let published = PublishedAddresses {
            front: publish(front_addr)?,
            resp: publish(resp_addr)?,
            workers: worker_addrs
                .iter()
                .map(|a| publish(*a))
                .collect::<Result<_, _>>()?,
            peer: publish(peer_addr)?,
        };
        if config.advertise.is_none() && front_addr.ip().is_unspecified() {
            tracing::warn!(
                front = %front_addr,
                "listening on a wildcard address without `advertise`: other nodes and \
                 clients are told {front_addr}, which they cannot reach from another machine"
            );
        }

        let me = node_key(&config.node_id);
        let (stop, shutdown) = watch::channel(false);
        let (agent, snapshots, agent_thread) = agent::spawn(
            AgentConfig::new(
                &config,
                crate::cluster::membership::Description {
                    placement: config.placement_version(),
                    ..agent::storage_description(
                        config.tier.tier(),
                        published.front.clone(),
                        published.resp.clone(),
                        published.workers.clone(),
                        config.vnodes,
                        published.peer.clone(),
                    )
                },
                tls.as_ref().map(|t| t.peers_out.clone()),
            ),
            shutdown.clone(),
        )
        .map_err(StartError::Thread)?;
        let view = snapshots.borrow().view.clone();
        let (mesh, inboxes) = Mesh::new(workers);
        let budget = (config.limits.memory_budget_bytes() / workers as u64) as usize;
        let (leaving, _) = watch::channel(false);
        let (backing, backing_rt) = if config.backing.enabled() {
            let (handle, rt) = crate::driver::backing::start(&config.backing)
                .map_err(|e| StartError::Config(format!("backing store: {e}")))?;
            (Some(handle), Some(rt))
        } else {
            (None, None)
        };
        // Scripts (EVAL) run in the shard, their commands planned by the RESP front end.
        crate::shard::install_script_runner(front::resp::scripting::run);
        let shared = Arc::new(Shared {
            config: config.clone(),
            users: Arc::new(users),
            tls: tls.clone(),
            mesh: mesh.clone(),
            published: published.clone(),
            resp_port: resp_addr.port(),
            started: Instant::now(),
            connections: ConnectionLimit::new(
                crate::driver::conns::fit_client_limit(config.limits.max_connections),
                config.limits.admin_connections,
            ),
            shutdown: shutdown.clone(),
            stop,
            leaving,
            faults,
            agent: agent.clone(),
            snapshots,
            policy: tokio::sync::watch::Sender::new(None),
            backing,
            pubsub: Default::default(),
            clients: Default::default(),
            scripts: Default::default(),
            metrics_sources: Default::default(),
        });

        let clock: crate::shard::SharedClock = Arc::new(SystemClock::new(config.clock_skew_ms));
        let mut shards: Vec<Shard> = (0..workers)
            .map(|i| {
                let mut shard = Shard::new(
                    ShardConfig {
                        me: Replica {
                            node: me,
                            worker: i as u32,
                        },
                        limits: config.limits,
                        memory_budget: budget,
                        max_changeset_keys: MAX_CHANGESET_KEYS,
                        settle_ms: config.cluster.settle_ms,
                        tombstone_memory_ms: config.tombstone_grace_secs.saturating_mul(1000),
                        disk_copy: config.disk_copy.unwrap_or_default(),
                    },
                    view.clone(),
                    fastrand::u64(..),
                    clock.clone(),
                );
                if faults.drop_after_first_ack {
                    shard.break_handoff();
                }
                shard.set_keyspace_flags(shared.pubsub.keyspace.clone());
                shard.set_script_runs(shared.scripts.runs.clone());
                shard
            })
            .collect();
        let mut fsync_thread = None;
        let mut journals: Vec<JournalSetup> = Vec::with_capacity(workers);
        if let Some(db) = &disk {
            attach_disks(db, &mut shards, config.disk.reserve_bytes)?;
            let every = Duration::from_millis(config.disk.fsync_ms);
            let (syncer, thread) =
                LsmSyncer::start(db.clone(), every).map_err(StartError::Thread)?;
            fsync_thread = Some(thread);
            journals.extend((0..workers).map(|_| JournalSetup::Lsm(syncer.clone())));
        } else if let Some(dir) = &config.data_dir {
            if dir.join(crate::driver::worker::SPILL_MARKER).exists() {
                // Evicted before this start: the log does not hold every key.
                for shard in shards.iter_mut() {
                    shard.mark_spilled();
                }
            }
            let opened = open_wals(dir, &config, &mut shards, progress)?;
            for (shard, log) in shards.iter_mut().zip(opened) {
                shard.enable_journal();
                let snapshot_after = config.snapshot_after_bytes.max(1 << 20);
                journals.push(JournalSetup::Wal(log, snapshot_after));
            }
        } else {
            journals.extend((0..workers).map(|_| JournalSetup::None));
        }
        // Keys stored under the other hash-tag rule move to their workers.
        crate::shard::place_by_rule(&mut shards)
            .map_err(|e| StartError::Config(format!("moving keys between workers: {e}")))?;
        let core_config = core_config(&config);
        let backing_config = Arc::new(config.backing.clone());
        let mut threads = Vec::with_capacity(workers);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut first = Some((front, resp, peer, http));
        for (i, ((inbox, listener), shard)) in inboxes
            .into_iter()
            .zip(worker_listeners)
            .zip(shards)
            .enumerate()
        {
            let journal = journals.remove(0);
            let mut services: Vec<Service> = vec![
                Box::new(|w: Rc<Worker>| w.set_key_event_sink(crate::pubsub::events::publish)),
                Box::new(move |w: Rc<Worker>| {
                    if let Ok(l) = tokio::net::TcpListener::from_std(listener) {
                        tokio::task::spawn_local(front::accept_own(w, l));
                    }
                }),
            ];
            if let Some((front_l, resp_l, peer_l, http_l)) = first.take() {
                let routes = Arc::new(NodeRoutes {
                    node_id: config.node_id.clone(),
                    secret: config.cluster_secret.clone(),
                    mesh: mesh.clone(),
                    agent: agent.clone(),
                });
                services.push(Box::new(move |w: Rc<Worker>| {
                    let shutdown = w.shared.shutdown();
                    if let Ok(l) = tokio::net::TcpListener::from_std(front_l) {
                        tokio::task::spawn_local(front::accept_shared(
                            w.clone(),
                            l,
                            Protocol::NativeFront,
                        ));
                    }
                    if let Ok(l) = tokio::net::TcpListener::from_std(resp_l) {
                        tokio::task::spawn_local(front::accept_shared(
                            w.clone(),
                            l,
                            Protocol::Resp,
                        ));
                    }
                    if let Some(Ok(l)) = http_l.map(tokio::net::TcpListener::from_std) {
                        tokio::task::spawn_local(front::http::accept(w.clone(), l));
                    }
                    let tls = w.shared.tls.clone();
                    if let Ok(l) = tokio::net::TcpListener::from_std(peer_l) {
                        let acceptor = tls.as_ref().map(|t| t.peers_in.clone());
                        tokio::task::spawn_local(listen::accept(
                            l,
                            routes,
                            shutdown.clone(),
                            acceptor,
                        ));
                    }
                    let every = w.shared.config.tls.reload_secs;
                    if let (Some(tls), true) = (tls, every > 0) {
                        let every = Duration::from_secs(every);
                        tokio::task::spawn_local(crate::tls::watch_files(tls, every, shutdown));
                    }
                }));
            }
            let mut shard = shard;
            shard.set_backing(backing_config.clone(), workers);
            let mut core = Core::new(shard, core_config.clone(), fastrand::u64(..));
            core.start_backing();
            let setup = WorkerSetup {
                shared: shared.clone(),
                index: i as u32,
                core,
                inbox,
                journal,
                services,
            };
            let pin = config.pin_workers.then_some(i % cores);
            let thread = std::thread::Builder::new()
                .name(format!("lkv-worker-{i}"))
                .spawn(move || {
                    if let Some(cpu) = pin {
                        pin_to_cpu(cpu);
                    }
                    worker_thread::run(setup)
                })
                .map_err(StartError::Thread)?;
            threads.push(thread);
        }
        Ok(Node {
            addresses: NodeAddresses {
                front: front_addr,
                resp: resp_addr,
                workers: worker_addrs,
                peer: peer_addr,
                http: http_addr,
            },
            published,
            shared,
            threads,
            agent_thread: Some(agent_thread),
            fsync_thread,
            _data_lock: data_lock,
            _backing: backing_rt,
        })
    }

    /// Reads the TLS certificate and key again, for new connections (`Ok` without TLS).
    pub fn reload_tls(&self) -> Result<(), tls::TlsError> {
        match &self.shared.tls {
            Some(t) => t.reload(),
            None => Ok(()),
        }
    }

    /// Where the node listens.
    pub fn addresses(&self) -> &NodeAddresses {
        &self.addresses
    }

    /// Appends `source`'s text to the node's `/metrics` from now on (parts running beside
    /// the node in its process, e.g. `latticekv local --faas`).
    pub fn add_metrics_source(&self, source: crate::driver::shared::MetricsSource) {
        self.shared.metrics_sources.add(source);
    }

    /// Where peers and clients are told to reach the node.
    pub fn published(&self) -> &PublishedAddresses {
        &self.published
    }

    /// Asks every worker to stop (returns at once; see [`join`](Self::join)).
    pub fn shutdown(&self) {
        let _ = self.shared.stop.send(true);
    }

    /// Resolves when the node stops by itself (after a `Leave` request).
    pub fn stopped(&self) -> watch::Receiver<bool> {
        self.shared.shutdown.clone()
    }

    /// True if other storage nodes are in this node's cluster view.
    pub fn has_peers(&self) -> bool {
        self.shared.snapshots.borrow().view.view.nodes().count() > 1
    }

    /// Leaves the cluster gracefully: out of the rings, every key handed to its new
    /// replicas (however long that takes), then stops. A signal received meanwhile (the
    /// `force` receiver becoming true) forces the leave: the node stops with the keys no
    /// replica acknowledged.
    pub fn leave_and_stop(self, mut force: watch::Receiver<bool>) -> std::io::Result<()> {
        let shared = self.shared.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            tokio::select! {
                r = crate::leave::leave(&shared, false) => {
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "leaving");
                    }
                }
                _ = force.wait_for(|f| *f) => {
                    tracing::warn!("leave forced: stopping with keys not yet handed off");
                }
            }
        });
        self.stop()
    }

    /// Waits for every worker thread to exit. Returns the first worker error, if any.
    pub fn join(mut self) -> std::io::Result<()> {
        let mut result = Ok(());
        if let Some(agent) = self.agent_thread.take() {
            let _ = agent.join();
        }
        for t in self.threads {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
                Err(_) => {
                    if result.is_ok() {
                        result = Err(std::io::Error::other("a worker thread panicked"));
                    }
                }
            }
        }
        // The syncer ends (after a last sync) once the workers dropped their handles.
        if let Some(fsync) = self.fsync_thread.take() {
            let _ = fsync.join();
        }
        result
    }

    /// Stops the node and waits for it.
    pub fn stop(self) -> std::io::Result<()> {
        self.shutdown();
        self.join()
    }
}

/// Opens (replaying, in parallel) every memory-tier worker's write-ahead log.
fn open_wals(
    dir: &std::path::Path,
    config: &NodeConfig,
    shards: &mut [Shard],
    progress: &dyn ReplayProgress,
) -> Result<Vec<store::wal::Wal>, StartError> {
    let dirs: Vec<std::path::PathBuf> = (0..shards.len())
        .map(|i| dir.join("wal").join(format!("worker-{i}")))
        .collect();
    progress.begin(dirs.iter().map(|d| replay::files_bytes(d)).sum());
    let opened: Vec<Result<store::wal::Wal, StartError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = shards
            .iter_mut()
            .zip(&dirs)
            .map(|(shard, wal_dir)| {
                let options = config.wal.clone();
                scope.spawn(move || {
                    open_wal_reporting(wal_dir, options, shard, progress)
                        .map(|(log, _recovery)| log)
                        .map_err(|source| StartError::Wal {
                            path: wal_dir.clone(),
                            source,
                        })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(StartError::Config(
                        "replaying a write-ahead log panicked".into(),
                    ))
                })
            })
            .collect()
    });
    progress.end();
    opened.into_iter().collect()
}

/// Opens every worker's keyspace and attaches it to its shard. Keyspaces of workers this
/// node no longer runs (it restarted with fewer workers) are merged into the shards of the
/// workers now owning their keys, then emptied.
fn attach_disks(db: &DiskDb, shards: &mut [Shard], reserve: u64) -> Result<(), StartError> {
    for (i, shard) in shards.iter_mut().enumerate() {
        let store = db.shard(i as u32).map_err(StartError::Disk)?;
        shard
            .attach_disk(db.clone(), store, reserve)
            .map_err(StartError::Disk)?;
    }
    for orphan in db.orphan_shards(shards.len() as u32) {
        let mut old = db.shard(orphan).map_err(StartError::Disk)?;
        let records: Vec<(Box<[u8]>, lattice::Record)> = old
            .iter()
            .collect::<Result<_, _>>()
            .map_err(StartError::Disk)?;
        tracing::info!(
            worker = orphan,
            keys = records.len(),
            "re-homing the keys of a former worker"
        );
        for (key, record) in records {
            let owner = shards.iter().position(|s| s.is_replica(&key)).unwrap_or(0);
            let shard = &mut shards[owner];
            shard
                .merge_gossip(vec![(bytes::Bytes::from(key.to_vec()), record)])
                .map_err(|e| StartError::Config(format!("re-homing keys: {e}")))?;
            old.remove(&key).map_err(StartError::Disk)?;
        }
    }
    Ok(())
}

fn offset(addr: SocketAddr, by: u16) -> SocketAddr {
    SocketAddr::new(addr.ip(), addr.port().saturating_add(by))
}
