//! Node configuration.
//!
//! Every field has a documented default (see `docs/configuration.md`); the `latticekv` binary
//! fills a [`NodeConfig`] from a TOML file, `LATTICEKV_*` environment variables and flags.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// Configuration of one storage node.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Name of this node (used in status output and, with the cluster, as its ring label).
    /// Default: `local`.
    pub node_id: String,
    /// Number of worker threads; 0 means one per available core. Default: 0.
    pub workers: usize,
    /// Native-protocol front port: accepts clients that don't know placement and forwards
    /// each request to the owning worker. Default: `127.0.0.1:7700`.
    pub listen: SocketAddr,
    /// RESP (Redis protocol) port. Default: `127.0.0.1:6380`.
    pub resp: SocketAddr,
    /// Host and first port of the per-worker native ports; worker `i` listens on
    /// `port + i`. Default (unset): the `listen` host, ports `listen + 1 ..`; ephemeral
    /// ports if `listen` uses port 0.
    pub worker_listen: Option<SocketAddr>,
    /// Peer port: where other nodes send replication, hand-off, anti-entropy and membership
    /// (never client requests; client ports never take these). Default (unset): the
    /// `listen` host, port `listen + 10000` (7700 → 17700, as Redis Cluster's bus); an
    /// ephemeral port if `listen` uses port 0.
    pub peer_listen: Option<SocketAddr>,
    /// Host (an IP address, or a DNS name) that peers and clients reach this node at. Every
    /// address the node publishes — its membership entry, its workers' addresses in
    /// topologies and redirects, its status — is this host with the port the node actually
    /// bound. Needed when the node binds a wildcard address (`0.0.0.0`, e.g. in a container)
    /// or is reached through another address than the one it binds. Default: unset (the
    /// bound addresses are published as they are).
    pub advertise: Option<String>,
    /// HTTP port: the status page, `/metrics` (Prometheus) and `/health` (`front::http`).
    /// Default: unset
    /// (no HTTP port; `latticekv local` turns it on, on loopback).
    pub http: Option<SocketAddr>,
    /// Shared secret of the cluster's nodes: every peer connection proves it (see
    /// `peer::secret`), so a node without it cannot join, gossip or exchange data. Default:
    /// unset (the peer port accepts any node; keep it on a private network).
    pub cluster_secret: Option<String>,
    /// Directory for node state: the write-ahead log (memory tier) or the LSM (disk tier),
    /// markers. Default: unset (nothing written to disk).
    pub data_dir: Option<PathBuf>,
    /// Period of gossip between replicas of a key, in milliseconds: the staleness bound of
    /// a replica. Default: 100 (the Anna paper's multicast period).
    pub gossip_period_ms: u64,
    /// Number of workers of this node holding each key unless a key's replication vector
    /// says otherwise. Default: 1.
    pub default_local_replication: u32,
    /// Virtual nodes per worker on the local hash ring. Default: 128.
    pub vnodes: u32,
    /// How old a tombstone must be before its reclamation starts, in seconds; a tombstone
    /// is reclaimed only once every replica holds it and no member is declared dead, and
    /// its delete is then remembered (by key hash) for as long again (see
    /// `docs/cluster.md`). Default: 60.
    pub tombstone_grace_secs: u64,
    /// Pin worker `i` to CPU `i mod cores` (Anna's one-thread-per-core). Default: false
    /// (several nodes or a benchmark client may share the machine).
    pub pin_workers: bool,
    /// Advertise the hash-tag placement (`placement::PLACEMENT_HASH_TAGS`): keys with a
    /// Redis hash tag (`{…}`) are placed by the tag once every storage node of the cluster
    /// advertises it. `false` keeps every key placed by its whole hash, as versions before
    /// hash tags did (and makes the whole cluster keep that rule). Default: true.
    pub hash_tags: bool,
    /// Size and resource limits.
    pub limits: Limits,
    /// Cluster membership, failure detection, replication across nodes.
    pub cluster: ClusterConfig,
    /// Which tier this node serves: `memory` (keys in RAM) or `disk` (keys in an embedded
    /// LSM under `data_dir`, RAM as a cache). Default: `memory`.
    pub tier: NodeTier,
    /// Settings of the disk tier's engine.
    pub disk: DiskConfig,
    /// Acknowledgement level of writes that do not ask for one (every RESP write, native
    /// requests without `durable`): `merged` or `durable`. Default: `merged`.
    pub ack: crate::ack::AckLevel,
    /// Replicas that must hold a write before it is acknowledged, for writes that ask for
    /// fewer (every RESP write): 0 or 1 is the replica that ran it alone. Default: 0.
    pub ack_replicas: u32,
    /// The write-ahead log of memory-tier workers, kept under `data_dir/wal/worker-<i>` when
    /// `data_dir` is set. Fsync policy `periodic` (100 ms) by default: a write acknowledged
    /// at the durable level always waits for an fsync (group commit), so the policy only
    /// bounds the power-loss window of writes acknowledged below it (docs/durability.md).
    pub wal: store::wal::WalOptions,
    /// Snapshot a memory-tier worker's state (and drop the log it covers) once this many
    /// bytes of log were written since the last snapshot. Default: 256 MiB.
    pub snapshot_after_bytes: u64,
    /// Testing only: milliseconds added to the clock readings behind this node's write
    /// timestamps, to test clients against a node whose clock is skewed. Default: 0.
    pub clock_skew_ms: i64,
    /// Users allowed on the client ports (`[[users]]` tables: name, `password_sha256`,
    /// `permissions`, `keys`; see `docs/security.md`). The binary's `--password` adds the
    /// user `default` with every permission. Default: none (the node is open).
    pub users: Vec<crate::auth::UserConfig>,
    /// Start even though a client port binds a non-loopback address and no user is
    /// configured (anyone who reaches the port may read, write and stop the node).
    /// Default: false (such a node refuses to start).
    pub insecure_no_auth: bool,
    /// TLS on every port (`[tls]`: `cert`, `key`, `ca`, `reload_secs`; see
    /// `docs/security.md`). Default: off.
    pub tls: crate::tls::TlsConfig,
    /// Statistics each worker publishes for the elasticity policy (`[stats]`: `period_ms`,
    /// `window_ms`, `hot_keys`; see `docs/elasticity.md`).
    pub stats: crate::stats::StatsConfig,
    /// A backing store and the write policies of keys (`[backing]`: `url`, `policy`,
    /// `[[backing.prefixes]]`, `technique`, `recovery_workers`, …; see docs/writeback.md).
    /// Default: none.
    pub backing: crate::writeback::BackingConfig,
    /// When a memory-tier node copies a key's live value to the key's disk-tier replicas:
    /// after every write (`every_write`, the default of `server`: the disk tier is a
    /// replica, and the `k` of fault tolerance counts it) or when the key is evicted
    /// (`on_eviction`, the default of `latticekv local`: the write-ahead log is the one
    /// durable copy, the disk tier holds what does not fit in RAM). Deletes reach the disk
    /// tier either way. See docs/durability.md. `None`: the command's default.
    pub disk_copy: Option<DiskCopy>,
}

/// When a memory-tier node copies live values to the disk tier (see
/// [`NodeConfig::disk_copy`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskCopy {
    /// After every write, by gossip (write-through).
    #[default]
    EveryWrite,
    /// When the key is evicted from RAM (spill).
    OnEviction,
}

impl std::str::FromStr for DiskCopy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "every_write" | "every-write" => Ok(DiskCopy::EveryWrite),
            "on_eviction" | "on-eviction" => Ok(DiskCopy::OnEviction),
            other => Err(format!(
                "unknown disk copy policy {other:?} (every_write or on_eviction)"
            )),
        }
    }
}

/// Testing only: faults a node can be started with (`LATTICEKV_FAULT`), so integration
/// tests can show that their checks catch a broken node. Never set in production.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Drop a handed-off key after the first new replica acknowledged it.
    pub drop_after_first_ack: bool,
    /// Abort the process right after acknowledging the first hand-off batch (a crash at
    /// the worst moment for the sender).
    pub abort_after_handoff_ack: bool,
    /// Block the worker this long per key of each client request it answers
    /// (`slow-request-us=N`; a batch of k keys blocks k·N): a server whose capacity is
    /// known, so the elasticity tests can saturate one node and watch latency fall when the
    /// monitor adds another, whatever the machine's speed. Per key, so that a batch split
    /// over more workers costs no more in all, as with real work.
    pub slow_request: Option<std::time::Duration>,
}

impl Faults {
    /// The faults named in `LATTICEKV_FAULT` (comma-separated), if any.
    pub fn from_env() -> Faults {
        let mut f = Faults::default();
        if let Ok(v) = std::env::var("LATTICEKV_FAULT") {
            for name in v.split(',').map(str::trim) {
                match name {
                    "drop-after-first-ack" => f.drop_after_first_ack = true,
                    "abort-after-handoff-ack" => f.abort_after_handoff_ack = true,
                    "" => {}
                    other if other.starts_with("slow-request-us=") => {
                        match other["slow-request-us=".len()..].parse::<u64>() {
                            Ok(us) => f.slow_request = Some(std::time::Duration::from_micros(us)),
                            Err(_) => tracing::warn!(fault = other, "bad LATTICEKV_FAULT ignored"),
                        }
                    }
                    other => tracing::warn!(fault = other, "unknown LATTICEKV_FAULT ignored"),
                }
            }
            if f != Faults::default() {
                tracing::warn!(?f, "started with faults injected on purpose (testing only)");
            }
        }
        f
    }
}

/// The storage tier a node serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeTier {
    /// Keys in RAM.
    #[default]
    Memory,
    /// Keys in the embedded LSM (fjall) under `data_dir`.
    Disk,
}

impl NodeTier {
    /// The placement tier.
    pub fn tier(self) -> placement::Tier {
        match self {
            NodeTier::Memory => placement::Tier::Memory,
            NodeTier::Disk => placement::Tier::Disk,
        }
    }

    /// `memory` or `disk`.
    pub fn name(self) -> &'static str {
        match self {
            NodeTier::Memory => "memory",
            NodeTier::Disk => "disk",
        }
    }
}

/// Disk-tier engine settings.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskConfig {
    /// Bytes that must stay free on the data directory's file system: below it writes get
    /// a STORAGE error (reads keep working) until space is freed. Default: 64 MiB.
    pub reserve_bytes: u64,
    /// Block cache of the LSM, bytes, for the whole node. Default: 64 MiB.
    pub cache_bytes: u64,
    /// Period of `fdatasync` of the LSM journal, ms; 0 = leave it to the OS. Every write is
    /// in the OS's buffers when acknowledged (it survives a crash of the process); this
    /// bounds what a power loss can take. Default: 1,000.
    pub fsync_ms: u64,
    /// Largest memtable of a worker's LSM keyspace before it is flushed to a level-0 table,
    /// bytes; at least 1 MiB (smaller values are raised to it). Fixed when the keyspace is
    /// created (a store opened again keeps its size). Default: 64 MiB (fjall's).
    pub memtable_bytes: u64,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            reserve_bytes: 64 << 20,
            cache_bytes: 64 << 20,
            fsync_ms: 1_000,
            memtable_bytes: 64 << 20,
        }
    }
}

/// Cluster settings. A node with no seeds is a cluster of one until others join it.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Front addresses (`host:port`) of nodes to join through. Default: none.
    pub seeds: Vec<String>,
    /// Nodes of the memory tier holding each key unless its vector says otherwise.
    /// Default: 1.
    pub default_global_replication: u32,
    /// Nodes of the disk tier holding each key unless its vector says otherwise (none if
    /// the cluster has no disk-tier node). Default: 1.
    pub default_disk_replication: u32,
    /// Period of heartbeats and cluster-metadata gossip, in ms. Default: 200.
    pub gossip_interval_ms: u64,
    /// Silence after which a member is suspected, in ms. Default: 1,500.
    pub suspect_after_ms: u64,
    /// Silence after which a member is declared dead, leaves the rings and its keys are
    /// re-replicated, in ms (the failure timeout). Default: 5,000.
    pub failure_timeout_ms: u64,
    /// Period of anti-entropy rounds (digest comparison with one random replica per worker),
    /// in ms. Default: 30,000.
    pub anti_entropy_ms: u64,
    /// After a view change, how long a read that misses also asks the previous owners, in
    /// ms. Default: 30,000.
    pub settle_ms: u64,
    /// Members contacted per gossip round. Default: 3.
    pub fanout: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            seeds: Vec::new(),
            default_global_replication: 1,
            default_disk_replication: 1,
            gossip_interval_ms: 200,
            suspect_after_ms: 1_500,
            failure_timeout_ms: 5_000,
            anti_entropy_ms: 30_000,
            settle_ms: 30_000,
            fanout: 3,
        }
    }
}

impl ClusterConfig {
    /// The anti-entropy period (at least 100 ms).
    pub fn anti_entropy_period(&self) -> Duration {
        Duration::from_millis(self.anti_entropy_ms.max(100))
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            node_id: "local".to_string(),
            workers: 0,
            listen: SocketAddr::from(([127, 0, 0, 1], 7700)),
            resp: SocketAddr::from(([127, 0, 0, 1], 6380)),
            worker_listen: None,
            peer_listen: None,
            advertise: None,
            http: None,
            cluster_secret: None,
            data_dir: None,
            gossip_period_ms: 100,
            default_local_replication: 1,
            vnodes: placement::ring::DEFAULT_VNODES,
            tombstone_grace_secs: 60,
            pin_workers: false,
            hash_tags: true,
            limits: Limits::default(),
            cluster: ClusterConfig::default(),
            tier: NodeTier::Memory,
            disk: DiskConfig::default(),
            ack: crate::ack::AckLevel::Merged,
            ack_replicas: 0,
            wal: store::wal::WalOptions {
                fsync: store::wal::FsyncPolicy::Periodic {
                    interval: store::wal::DEFAULT_PERIODIC_INTERVAL,
                },
                ..store::wal::WalOptions::default()
            },
            snapshot_after_bytes: 256 << 20,
            clock_skew_ms: 0,
            users: Vec::new(),
            insecure_no_auth: false,
            tls: crate::tls::TlsConfig::default(),
            stats: crate::stats::StatsConfig::default(),
            backing: crate::writeback::BackingConfig::default(),
            disk_copy: None,
        }
    }
}

impl NodeConfig {
    /// The cluster's default replication vector: `default_global_replication` memory
    /// nodes × `default_local_replication` workers, plus `default_disk_replication` disk
    /// nodes (one worker each).
    pub fn default_vector(&self) -> placement::ReplicationVector {
        let mut v = crate::view::default_vector(
            self.cluster.default_global_replication,
            self.default_local_replication,
        );
        v.disk = placement::Replication {
            global: self.cluster.default_disk_replication,
            local: 1,
        };
        v
    }

    /// The number of workers to run: `workers`, or the number of available cores if 0.
    pub fn worker_count(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// The address of the peer port: `peer_listen`, or the default (see its docs).
    pub fn peer_addr(&self) -> SocketAddr {
        match self.peer_listen {
            Some(a) => a,
            None if self.listen.port() == 0 => SocketAddr::new(self.listen.ip(), 0),
            None => SocketAddr::new(
                self.listen.ip(),
                self.listen.port().checked_add(10_000).unwrap_or(0),
            ),
        }
    }

    /// The gossip period as a duration (at least 1 ms).
    pub fn gossip_period(&self) -> Duration {
        Duration::from_millis(self.gossip_period_ms.max(1))
    }

    /// The address this node publishes for a socket bound at `bound`: the advertised host
    /// with `bound`'s port, or `bound` itself when no host is advertised.
    ///
    /// Fails if `advertise` is not a usable host (see [`advertised_host`]).
    pub fn published(&self, bound: SocketAddr) -> Result<String, AdvertiseError> {
        match &self.advertise {
            Some(host) => Ok(join_host_port(&advertised_host(host)?, bound.port())),
            None => Ok(bound.to_string()),
        }
    }
}

impl NodeConfig {
    /// True if peers must prove they belong to the cluster: a cluster secret, or mutual TLS.
    pub fn peers_authenticated(&self) -> bool {
        self.cluster_secret.is_some() || (self.tls.enabled() && self.tls.ca.is_some())
    }

    /// Refuses, unless `insecure_no_auth`, a node whose client ports (`listen`, `resp`,
    /// `worker_listen`) bind a non-loopback address while no user is configured, or whose
    /// peer port does while peers are not authenticated (no cluster secret, no mutual TLS).
    pub fn check_exposure(&self) -> Result<(), ExposureError> {
        if self.insecure_no_auth {
            return Ok(());
        }
        let exposed = |a: &SocketAddr| !a.ip().is_loopback();
        if self.users.is_empty() {
            let ports = [Some(self.listen), Some(self.resp), self.worker_listen];
            if let Some(addr) = ports.into_iter().flatten().find(exposed) {
                return Err(ExposureError::Clients(addr));
            }
        }
        let peer = self.peer_addr();
        if !self.peers_authenticated() && exposed(&peer) {
            return Err(ExposureError::Peers(peer));
        }
        Ok(())
    }
}

impl NodeConfig {
    /// The placement version this node advertises (see [`NodeConfig::hash_tags`]).
    pub fn placement_version(&self) -> u32 {
        if self.hash_tags {
            placement::PLACEMENT_HASH_TAGS
        } else {
            placement::PLACEMENT_WHOLE_KEY
        }
    }

    /// Checks what a storage node checks before it binds a port: the worker count, the
    /// default local replication, the users (returned, loaded), that a disk-tier node and a
    /// node acknowledging `durable` have a data directory, and the write-ahead log's options (also when no log is kept: a
    /// mistake in the file is reported, not ignored).
    pub fn validate(&self) -> Result<crate::auth::Users, ConfigError> {
        let workers = self.worker_count();
        if workers > 1024 {
            return Err(ConfigError(format!(
                "{workers} workers is more than the 1024 supported"
            )));
        }
        self.validate_vnodes()?;
        if self.default_local_replication == 0 {
            return Err(ConfigError(
                "default_local_replication must be at least 1".into(),
            ));
        }
        if self.tier == NodeTier::Disk && self.data_dir.is_none() {
            return Err(ConfigError(
                "a disk-tier node needs a data directory (data_dir / --data-dir)".into(),
            ));
        }
        // Without a data directory nothing is ever on disk: every write would be refused
        // with STORAGE after the node had started. Refuse to start instead.
        if self.ack == crate::ack::AckLevel::Durable && self.data_dir.is_none() {
            return Err(ConfigError(
                "ack = durable needs a data directory (--data-dir / data_dir / \
                 LATTICEKV_DATA_DIR): without one no write can ever be durable"
                    .into(),
            ));
        }
        self.wal
            .validate()
            .map_err(|e| ConfigError(format!("[wal]: {e}")))?;
        self.stats
            .validate()
            .map_err(|e| ConfigError(format!("[stats]: {e}")))?;
        self.backing
            .validate()
            .map_err(|e| ConfigError(format!("[backing]: {e}")))?;
        crate::auth::Users::from_config(&self.users).map_err(|e| ConfigError(e.to_string()))
    }

    /// What a routing node checks before it binds a port: the settings it uses (virtual
    /// nodes, users); the rest of the file (workers, log, tiers) is a storage node's.
    pub fn validate_routing(&self) -> Result<crate::auth::Users, ConfigError> {
        self.validate_vnodes()?;
        crate::auth::Users::from_config(&self.users).map_err(|e| ConfigError(e.to_string()))
    }

    /// Peers refuse a member claiming more virtual nodes than `cluster::state::MAX_VNODES`:
    /// such a node could never join, and its own rings would take that many points per
    /// worker.
    fn validate_vnodes(&self) -> Result<(), ConfigError> {
        let max_vnodes = crate::cluster::state::MAX_VNODES;
        if self.vnodes > max_vnodes {
            return Err(ConfigError(format!(
                "vnodes = {} is more than the {max_vnodes} other nodes accept",
                self.vnodes
            )));
        }
        Ok(())
    }
}

/// A configuration a node refuses to start with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// A port is reachable from other hosts without authentication.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExposureError {
    /// A client port, and no password or user is configured.
    #[error(
        "client port {0} is reachable from other hosts but no password is set: add \
         --password PASS (or LATTICEKV_PASSWORD, or [[users]] in the config file), bind \
         127.0.0.1, or start with --insecure-no-auth to serve without authentication"
    )]
    Clients(SocketAddr),
    /// The peer port, and peers are not authenticated.
    #[error(
        "peer port {0} is reachable from other hosts but peers are not authenticated: add \
         --cluster-secret SECRET (or LATTICEKV_CLUSTER_SECRET) on every node, or mutual TLS \
         (--tls-cert, --tls-key and --tls-ca), bind the peer port to 127.0.0.1 \
         (--peer-listen), or start with --insecure-no-auth to accept any node"
    )]
    Peers(SocketAddr),
}

/// Why an advertised host was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdvertiseError {
    /// A wildcard address (`0.0.0.0`, `::`): nobody can connect to it.
    #[error(
        "advertise {0:?}: a wildcard address cannot be reached; advertise the address peers \
         and clients should use"
    )]
    Wildcard(String),
    /// A port was given: the node publishes the ports it binds.
    #[error(
        "advertise {0:?}: give a host only (an IP address or a DNS name); the node \
         publishes the ports it binds"
    )]
    WithPort(String),
    /// Neither an IP address nor a DNS name.
    #[error("advertise {0:?}: not an IP address or a DNS name")]
    NotAHost(String),
}

/// Validates an advertised host and returns it in canonical form: an IP address (IPv6
/// with or without brackets) or a DNS name (letters, digits, `-`, `.`; at most 253
/// characters). A port is not accepted: the node publishes the ports it binds.
pub fn advertised_host(host: &str) -> Result<String, AdvertiseError> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        if ip.is_unspecified() {
            return Err(AdvertiseError::Wildcard(host.to_string()));
        }
        return Ok(ip.to_string());
    }
    let valid = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if valid {
        Ok(host.to_string())
    } else if host.contains(':') {
        Err(AdvertiseError::WithPort(host.to_string()))
    } else {
        Err(AdvertiseError::NotAHost(host.to_string()))
    }
}

/// `host:port`, with an IPv6 host in brackets.
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Explicit limits. Exceeding one is a clear error to the client, never a crash or a
/// silent truncation.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Longest key in bytes. Default: 16 KiB.
    pub max_key_size: usize,
    /// Largest value in bytes (an incoming write, and a value after merging). Default: 16 MiB.
    pub max_value_size: usize,
    /// Largest native-protocol frame and largest RESP bulk string. Default: 32 MiB.
    pub max_frame_size: usize,
    /// Largest request, in bytes: a whole RESP command (counted as its bulk lengths are
    /// declared, so one announcing more is refused before its data is read) and a native
    /// frame (with `max_frame_size`, whichever is smaller). The connection is closed after
    /// the error: the stream cannot be resynchronised. Default: 512 MiB (Redis caps one bulk
    /// string at 512 MB and a client's query buffer at 1 GB).
    pub max_request_bytes: usize,
    /// Largest reply to a request reading several values (RESP MGET, native GetMany): one
    /// that would be larger gets an error instead, before the reply is built. A single value
    /// is always answered (it is bounded by `max_value_size`). Default: 64 MiB (four values of
    /// the largest size, and the largest frame the Rust client reads).
    pub max_reply_bytes: usize,
    /// Seconds a client connection may stay idle (nothing sent, nothing waiting) before the
    /// node closes it; 0 = never. Connections with subscriptions are exempt. Default: 0 (as
    /// Redis's `timeout 0`: pooled clients keep idle connections).
    pub idle_timeout_secs: u64,
    /// Seconds a request may take to arrive once its first byte has: a connection holding
    /// an incomplete request for longer is closed (it would hold a connection slot and a
    /// buffer for free); 0 = never. Default: 30.
    pub partial_request_timeout_secs: u64,
    /// Most keys or arguments in one request. Default: 1,048,576 (Redis's multibulk limit).
    pub max_request_items: usize,
    /// Most simultaneous client connections for the whole node. Default: 10,000.
    pub max_connections: usize,
    /// Client connections allowed beyond `max_connections` for administrators: such a
    /// connection must first authenticate as a user with the `admin` permission, or it is
    /// closed (on a node without users they are not used). Default: 16.
    pub admin_connections: usize,
    /// Memory budget for stored data in bytes, split evenly across workers; 0 means half of
    /// the machine's RAM. Writes that add data beyond it get an out-of-memory error;
    /// reads and deletes keep working. Default: 0.
    pub memory_budget: u64,
    /// Most explicit replication vectors (and recent returns to the default) a node keeps:
    /// the exceptions to the default placement, so hot keys and keys placed by hand, not
    /// one per key. A bound on what peers can make a node hold (each costs ~100 bytes plus
    /// its key). Default: 10,000,000.
    pub max_replication_entries: usize,
    /// How far ahead of the node's clock a client-supplied LWW timestamp may be, in ms;
    /// one further ahead is refused (it would win every later write of the key, and move
    /// the worker's clock). Default: 60,000.
    pub max_clock_ahead_ms: u64,
    /// How long a Lua script (`EVAL`) may run before it is aborted, in ms (Redis's
    /// `busy-reply-threshold`); the writes it made before stay. Default: 5,000.
    pub script_time_limit_ms: u64,
    /// Most bytes of Lua heap one script may use; an allocation beyond fails the script
    /// with an error. Default: 64 MiB.
    pub script_memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_size: 16 * 1024,
            max_value_size: 16 * 1024 * 1024,
            max_frame_size: 32 * 1024 * 1024,
            max_request_bytes: 512 * 1024 * 1024,
            max_reply_bytes: 64 * 1024 * 1024,
            idle_timeout_secs: 0,
            partial_request_timeout_secs: 30,
            max_request_items: 1024 * 1024,
            max_connections: 10_000,
            admin_connections: 16,
            memory_budget: 0,
            max_replication_entries: 10_000_000,
            max_clock_ahead_ms: 60_000,
            script_time_limit_ms: 5_000,
            script_memory_bytes: 64 << 20,
        }
    }
}

impl Limits {
    /// Largest native frame accepted: `max_frame_size` or `max_request_bytes`, whichever is
    /// smaller.
    pub fn max_native_request(&self) -> usize {
        self.max_frame_size.min(self.max_request_bytes)
    }

    /// The idle timeout, if any.
    pub fn idle_timeout(&self) -> Option<Duration> {
        (self.idle_timeout_secs > 0).then(|| Duration::from_secs(self.idle_timeout_secs))
    }

    /// The partial-request timeout, if any.
    pub fn partial_request_timeout(&self) -> Option<Duration> {
        (self.partial_request_timeout_secs > 0)
            .then(|| Duration::from_secs(self.partial_request_timeout_secs))
    }

    /// Time a new client connection has to finish its TLS handshake: the partial-request
    /// timeout, or 10 s when that is off (a handshake never stays open-ended).
    pub fn handshake_timeout(&self) -> Duration {
        self.partial_request_timeout()
            .unwrap_or(Duration::from_secs(10))
    }

    /// The memory budget in bytes, resolving 0 to half of physical RAM.
    pub fn memory_budget_bytes(&self) -> u64 {
        if self.memory_budget > 0 {
            return self.memory_budget;
        }
        physical_memory().map_or(1 << 30, |m| m / 2)
    }
}

/// Physical memory of the machine in bytes, if it can be read.
fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf has no preconditions; it returns -1 on error, which we check.
    let (pages, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages <= 0 || page_size <= 0 {
        return None;
    }
    Some(pages as u64 * page_size as u64)
}

#[cfg(test)]
mod tests;
