//! Starting and stopping a node.
//!
//! [`Node::start`] binds every port first (so a port in use is reported before anything
//! runs), then starts one thread per worker. [`Node::shutdown`] asks every worker to stop:
//! listeners close, connections finish the batch they are on, workers send their last
//! gossip, and [`Node::join`] returns when all threads have exited.

use std::fs::{File, OpenOptions};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use placement::{node_key, Replica};
use store::{DiskDb, DiskOptions};
use tokio::sync::watch;

use crate::cluster::agent::{self, AgentConfig};
use crate::cluster::configured_vector;
use crate::cluster::membership::DetectorConfig;
use crate::config::{NodeConfig, NodeTier};
use crate::durability::{open_wal, Durability, LsmSyncer, WalState};
use crate::mesh::Mesh;
use crate::shard::{Shard, ShardConfig};
use crate::worker::{self, Shared, WorkerSetup};

/// Most changeset keys before a worker gossips early.
const MAX_CHANGESET_KEYS: usize = 65_536;

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
}

/// The addresses a node publishes — in its membership entry, topologies, redirects and
/// status: the ports it bound, with the advertised host if one is configured
/// ([`NodeConfig::advertise`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishedAddresses {
    /// Native front address.
    pub front: String,
    /// RESP address.
    pub resp: String,
    /// Native address of each worker.
    pub workers: Vec<String>,
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

impl Node {
    /// Binds the node's ports and starts its workers.
    pub fn start(config: NodeConfig) -> Result<Node, StartError> {
        let workers = config.worker_count();
        if workers > 1024 {
            return Err(StartError::Config(format!(
                "{workers} workers is more than the 1024 supported"
            )));
        }
        if config.default_local_replication == 0 {
            return Err(StartError::Config(
                "default_local_replication must be at least 1".into(),
            ));
        }
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
                };
                Some(DiskDb::open(&dir.join("lsm"), &options).map_err(StartError::Disk)?)
            }
        };

        let front = bind(config.listen)?;
        let front_addr = local_addr(&front, config.listen)?;
        let resp = bind(config.resp)?;
        let resp_addr = local_addr(&resp, config.resp)?;
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
        let cluster = &config.cluster;
        let default = configured_vector(&config);
        let (agent, snapshots, agent_thread) = agent::spawn(
            AgentConfig {
                node_id: config.node_id.clone(),
                desc: agent::storage_description(
                    config.tier.tier(),
                    published.front.clone(),
                    published.resp.clone(),
                    published.workers.clone(),
                    config.vnodes,
                ),
                seeds: cluster.seeds.clone(),
                gossip_interval: std::time::Duration::from_millis(
                    cluster.gossip_interval_ms.max(10),
                ),
                detector: DetectorConfig {
                    suspect_after_ms: cluster.suspect_after_ms,
                    dead_after_ms: cluster.failure_timeout_ms.max(cluster.suspect_after_ms),
                },
                fanout: cluster.fanout.max(1),
                default,
                max_replication_entries: config.limits.max_replication_entries,
            },
            shutdown.clone(),
        )
        .map_err(StartError::Thread)?;
        let view = snapshots.borrow().view.clone();
        let (mesh, inboxes) = Mesh::new(workers);
        let budget = (config.limits.memory_budget_bytes() / workers as u64) as usize;
        let shared = Arc::new(Shared {
            config: config.clone(),
            me,
            mesh,
            worker_addrs: worker_addrs.clone(),
            front_addr,
            resp_addr,
            published: published.clone(),
            started: Instant::now(),
            connections: AtomicUsize::new(0),
            shutdown,
            stop,
            agent,
            snapshots,
        });

        let mut shared_listeners = Some((front, resp));
        let mut threads = Vec::with_capacity(workers);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut shards: Vec<Shard> = (0..workers)
            .map(|i| {
                Shard::new(
                    ShardConfig {
                        me: Replica {
                            node: me,
                            worker: i as u32,
                        },
                        limits: config.limits,
                        memory_budget: budget,
                        max_changeset_keys: MAX_CHANGESET_KEYS,
                        settle_ms: config.cluster.settle_ms,
                        clock_skew_ms: config.clock_skew_ms,
                    },
                    view.clone(),
                )
            })
            .collect();
        let mut fsync_thread = None;
        let mut durabilities: Vec<Durability> = Vec::with_capacity(workers);
        if let Some(db) = &disk {
            attach_disks(db, &mut shards, config.disk.reserve_bytes)?;
            let every = Duration::from_millis(config.disk.fsync_ms);
            let (syncer, thread) =
                LsmSyncer::start(db.clone(), every).map_err(StartError::Thread)?;
            fsync_thread = Some(thread);
            durabilities.extend((0..workers).map(|_| Durability::Lsm(syncer.clone())));
        } else if let Some(dir) = &config.data_dir {
            // Every worker replays its own log; in parallel, as they will run.
            let opened: Vec<Result<store::wal::Wal, StartError>> = std::thread::scope(|scope| {
                let handles: Vec<_> = shards
                    .iter_mut()
                    .enumerate()
                    .map(|(i, shard)| {
                        let wal_dir = dir.join("wal").join(format!("worker-{i}"));
                        let options = config.wal.clone();
                        scope.spawn(move || {
                            open_wal(&wal_dir, options, shard)
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
            for (shard, log) in shards.iter_mut().zip(opened) {
                let log = log?;
                shard.enable_journal();
                durabilities.push(Durability::Wal(WalState {
                    log,
                    since_snapshot: std::cell::Cell::new(0),
                    snapshotting: std::cell::Cell::new(false),
                    snapshot_after: config.snapshot_after_bytes.max(1 << 20),
                }));
            }
        } else {
            durabilities.extend((0..workers).map(|_| Durability::None));
        }
        for (i, (((inbox, listener), shard), durability)) in inboxes
            .into_iter()
            .zip(worker_listeners)
            .zip(shards)
            .zip(durabilities)
            .enumerate()
        {
            let setup = WorkerSetup {
                shared: shared.clone(),
                worker: i as u32,
                shard,
                inbox,
                listener,
                shared_listeners: shared_listeners.take(),
                durability,
            };
            let pin = config.pin_workers.then_some(i % cores);
            let thread = std::thread::Builder::new()
                .name(format!("lkv-worker-{i}"))
                .spawn(move || {
                    if let Some(cpu) = pin {
                        pin_to_cpu(cpu);
                    }
                    worker::run(setup)
                })
                .map_err(StartError::Thread)?;
            threads.push(thread);
        }
        Ok(Node {
            addresses: NodeAddresses {
                front: front_addr,
                resp: resp_addr,
                workers: worker_addrs,
            },
            published,
            shared,
            threads,
            agent_thread: Some(agent_thread),
            fsync_thread,
            _data_lock: data_lock,
        })
    }

    /// Where the node listens.
    pub fn addresses(&self) -> &NodeAddresses {
        &self.addresses
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

    /// Leaves the cluster gracefully: out of the rings, every key handed to its other owners
    /// (bounded by a deadline), then stops.
    pub fn leave_and_stop(self) -> std::io::Result<()> {
        let shared = self.shared.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(leave(&shared));
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

/// How long a leaving node waits for its keys to reach their other owners.
pub const LEAVE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// Leaves the cluster: marks this node as left (its workers then hand every key to the
/// other owners) and waits until every worker has handed everything off
/// ([`WorkerStats::handed_everything_off`](crate::mesh::WorkerStats::handed_everything_off)),
/// or the deadline passes.
pub async fn leave(shared: &Shared) {
    shared.agent.leave().await;
    let deadline = Instant::now() + LEAVE_DEADLINE;
    while Instant::now() < deadline {
        let stats = shared.mesh.stats().await;
        if stats.iter().all(|s| s.handed_everything_off()) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tracing::warn!("leave deadline passed with keys not yet handed off");
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
            shard.merge_gossip(vec![(bytes::Bytes::from(key.to_vec()), record)]);
            if let Some(e) = shard.take_disk_error() {
                return Err(StartError::Config(format!("re-homing keys: {e}")));
            }
            old.remove(&key).map_err(StartError::Disk)?;
        }
    }
    Ok(())
}

fn offset(addr: SocketAddr, by: u16) -> SocketAddr {
    SocketAddr::new(addr.ip(), addr.port().saturating_add(by))
}
