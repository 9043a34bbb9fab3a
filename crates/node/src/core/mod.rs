//! The replica core: everything one worker decides, as a state machine without I/O.
//!
//! A worker's logic — running client operations here or on other replicas, carrying out
//! acknowledgement levels, gossip rounds and their retries, hand-off, anti-entropy, answering
//! other workers — lives in [`Core`]. Inputs are method calls: client operations
//! ([`Core::submit`]), requests from other workers ([`Core::on_peer`]) and their answers
//! ([`Core::on_reply`]), a new view ([`Core::set_view`]), a finished disk sync
//! ([`Core::on_synced`]) and the passing of time ([`Core::tick`], at the latest when
//! [`Core::next_deadline`] says). Outputs are [`Effect`]s the caller takes with
//! [`Core::take_effects`] and carries out: messages to other workers, answers, finished
//! client requests, log appends, disk syncs. Time comes from an injected clock and every
//! random choice from a seeded generator, so the tokio driver (`crate::driver`) and the
//! deterministic simulation (`tests/simulation.rs`) run this same code.
//!
//! # Layout
//! - this module: the core's state, its configuration, effects, timers and counters;
//! - [`messages`]: what workers say to each other;
//! - `requests`: client operations — here, forwarded, redirected;
//! - `fetch`: reads that ask other workers for records — reads that miss while keys move,
//!   reads forwarded under another view, reads from every replica;
//! - `acks`: acknowledgement levels, the one place a write waits for the disk or for other
//!   replicas;
//! - `gossip`: gossip rounds, batches in flight, hand-off acknowledgements;
//! - `entropy`: anti-entropy sessions, bucket by bucket, bounded and paced;
//! - `reclaim`: reclaiming tombstones once every replica holds them;
//! - `reply_limit`: the reply limit of requests reading several values;
//! - `serve`: answering other workers;
//! - `tier`: ops on keys a memory-tier worker evicted, waiting for the disk tier's record.
//!
//! Every op served here (a client's or one forwarded by another worker) is counted in the
//! worker's statistics ([`crate::stats::Recorder`]), whose periods close in
//! [`Core::tick`].

mod acks;
mod backing;
mod entropy;
mod fetch;
mod gossip;
pub mod messages;
mod reclaim;
mod reply_limit;
mod requests;
mod serve;
#[cfg(test)]
mod stats_tests;
mod tier;

use std::sync::Arc;

use foldhash::fast::FixedState;
use placement::Replica;

use crate::ack::Ack;
use crate::error::NodeError;
use crate::op::OpResult;
use crate::shard::{Shard, ShardStats, SharedClock};
use crate::stats::{Gauges, Recorder, StatsConfig, Window};
use crate::view::ViewState;

pub use messages::{PeerFailure, PeerMsg, PeerReply, PeerResult, RepairCursor};
pub use requests::{Routing, Submitted};

type Map<K, V> = hashbrown::HashMap<K, V, FixedState>;

/// Entries compared per tick while a change of the rings is reconciled (see
/// `Shard::reconcile_step`): about a millisecond of work, the keys it hands off included,
/// so requests wait for at most that between two steps (a join over 100,000 keys compared
/// 16,384 entries per step and held every request of the seed for ~200 ms: issue 14).
pub(crate) const RECONCILE_STEP_ENTRIES: usize = 2 * 1024;

/// A request this core sent to another worker, to be answered with [`Core::on_reply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub u64);

/// A request another worker sent this core, answered by [`Effect::Respond`]; chosen by the
/// caller of [`Core::on_peer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u64);

/// A client request that did not finish at once; [`Effect::Complete`] carries its results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// A disk sync the core waits for, reported with [`Core::on_synced`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SyncId(pub u64);

/// What the core asks its driver to do.
#[derive(Debug)]
pub enum Effect {
    /// Send `msg` to worker `to` — through the mesh if it is on this node, else to the
    /// node's peer address `peer` — and report its answer with [`Core::on_reply`].
    Send {
        /// The request's id.
        req: ReqId,
        /// The destination worker.
        to: Replica,
        /// The destination node's peer address (`None` for this node's workers, or a
        /// node the view does not know: the send then fails as unreachable).
        peer: Option<String>,
        /// The request.
        msg: PeerMsg,
    },
    /// Answer a request another worker sent.
    Respond {
        /// The request, as given to [`Core::on_peer`].
        token: Token,
        /// The answer.
        result: Result<PeerReply, NodeError>,
    },
    /// A client request finished.
    Complete {
        /// The request.
        ticket: Ticket,
        /// One result per op, in request order.
        results: Vec<OpResult>,
    },
    /// Append these log payloads (encoded changes, see
    /// [`encode_journal`](crate::codec::encode_journal)) to the write-ahead log, in order,
    /// after every earlier append.
    Journal(Vec<bytes::Bytes>),
    /// Report with [`Core::on_synced`] once everything appended to the log (or written to
    /// a disk-tier store) before this effect is durable. `strict`: a worker without durable
    /// storage answers with an error; otherwise it answers at once (the records are as
    /// durable as it can make them).
    Sync {
        /// The sync.
        id: SyncId,
        /// Fail without durable storage.
        strict: bool,
    },
    /// A request to `to` timed out: the connection may be silently dead (a partition), so
    /// the driver should drop it and reconnect next time.
    Unreachable {
        /// The worker.
        to: Replica,
    },
    /// Merge these records into the backing store, in one transaction (an empty batch:
    /// ping it), and report with [`Core::on_backing_applied`].
    BackingApply {
        /// The batch.
        id: u64,
        /// Keys and their records.
        batch: Vec<(bytes::Bytes, lattice::Record)>,
    },
    /// Read these keys from the backing store and report with
    /// [`Core::on_backing_fetched`].
    BackingFetch {
        /// The request.
        id: u64,
        /// The keys.
        keys: Vec<bytes::Bytes>,
    },
}

/// How a core behaves; defaults are the node's defaults.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// Period of gossip rounds, ms.
    pub gossip_period_ms: u64,
    /// Period of anti-entropy with a random other worker, ms.
    pub anti_entropy_period_ms: u64,
    /// Delay between a change of the rings and anti-entropy with every other worker, ms
    /// (hand-off moves the bulk first).
    pub anti_entropy_after_view_ms: u64,
    /// Most bytes per second anti-entropy sends and asks for.
    pub anti_entropy_bytes_per_sec: u64,
    /// Time allowed for an answer from another worker, ms.
    pub peer_timeout_ms: u64,
    /// Most gossip batches in flight at once.
    pub max_batches_in_flight: usize,
    /// Most estimated bytes of records in the gossip batches in flight at once (one batch
    /// may always go out, however large).
    pub max_bytes_in_flight: usize,
    /// Pause between gossip rounds while a backlog drains, ms.
    pub backlog_pause_ms: u64,
    /// Period of moving queued changes to the write-ahead log, ms.
    pub journal_flush_ms: u64,
    /// The acknowledgement of writes that ask for less.
    pub default_ack: Ack,
    /// How old a tombstone must be before its reclamation starts, ms (it is reclaimed only
    /// once every replica holds it, however old).
    pub tombstone_grace_ms: u64,
    /// Most bytes of values a request reading several keys may collect (on each worker it
    /// runs on); beyond it, its values are replaced by [`NodeError::ReplyTooLarge`].
    pub max_reply_bytes: usize,
    /// The worker's statistics: period, window, hot keys.
    pub stats: StatsConfig,
}

/// Reads the busy time of the worker's thread since it started, in ns (see
/// [`Core::set_busy_meter`]).
pub type BusyMeter = Box<dyn Fn() -> u64 + Send>;

impl CoreConfig {
    /// The default of [`peer_timeout_ms`](Self::peer_timeout_ms).
    pub const DEFAULT_PEER_TIMEOUT_MS: u64 = 5_000;
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            gossip_period_ms: 100,
            anti_entropy_period_ms: 30_000,
            anti_entropy_after_view_ms: 500,
            anti_entropy_bytes_per_sec: 32 << 20,
            peer_timeout_ms: Self::DEFAULT_PEER_TIMEOUT_MS,
            max_batches_in_flight: 64,
            max_bytes_in_flight: 16 << 20,
            backlog_pause_ms: 1,
            journal_flush_ms: 2,
            default_ack: Ack::MERGED,
            tombstone_grace_ms: 60_000,
            max_reply_bytes: 64 << 20,
            stats: StatsConfig::default(),
        }
    }
}

/// Counters of a core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreStats {
    /// The shard's counters.
    pub shard: ShardStats,
    /// Replication batches sent and not yet acknowledged.
    pub batches_in_flight: u64,
    /// Requests to other workers waiting for an answer.
    pub requests_in_flight: u64,
    /// Anti-entropy exchanges that found differing buckets.
    pub repairs: u64,
    /// Anti-entropy sessions that walked every bucket with their peer.
    pub entropy_sessions: u64,
    /// Client requests and forwards waiting for other workers or the disk.
    pub jobs: u64,
    /// The id of the oldest of those `jobs`, if any. Ids grow with every request, so the
    /// requests open at some moment have all finished once `oldest_job` is `None` or
    /// above the `last_id` read then (what a leaving node waits for: see
    /// [`LeaveProgress`](crate::leave::LeaveProgress)).
    pub oldest_job: Option<u64>,
    /// The last id given to a request (of a client, another worker, or to one).
    pub last_id: u64,
}

impl CoreStats {
    /// True if the worker has nothing left to hand to another node: it stores nothing
    /// (tombstones included), has no replication queued (requeued batches included) and
    /// none in flight. A leaving node stops only when all its workers are so: a worker
    /// that holds no live key may still hold a delete, or a key a replica has not yet
    /// acknowledged.
    pub fn handed_everything_off(&self) -> bool {
        self.shard.stored_keys == 0
            && self.shard.pending_replication == 0
            && self.batches_in_flight == 0
    }
}

/// When each periodic task is next due (monotonic ms).
#[derive(Debug, Default)]
struct Timers {
    gossip: u64,
    anti_entropy: u64,
    journal: Option<u64>,
}

/// One worker's replica logic (see the module docs).
pub struct Core {
    shard: Shard,
    config: CoreConfig,
    clock: SharedClock,
    rng: fastrand::Rng,
    effects: Vec<Effect>,
    next_id: u64,
    /// Requests sent to other workers, awaiting their answers.
    pending: Map<ReqId, gossip::Pending>,
    /// Client requests and forwards in progress.
    jobs: requests::Jobs,
    /// Fetches of evicted keys from the disk tier.
    tier: tier::TierFetches,
    /// Batches to the backing store, clients waiting for it, the mode.
    backing: backing::BackingState,
    /// Writes waiting for their acknowledgement level.
    writes: acks::Writes,
    /// Disk syncs awaited.
    syncs: Map<SyncId, acks::SyncWaiter>,
    /// Gossip round state.
    gossip: gossip::GossipState,
    /// Anti-entropy sessions.
    entropy: entropy::Entropy,
    /// Tombstone reclamation.
    reclaim: reclaim::Reclaimer,
    timers: Timers,
    repairs: u64,
    /// Anti-entropy sessions completed.
    entropy_sessions: u64,
    /// When the rings or replication vectors last changed (monotonic ms): tombstones are
    /// reclaimed only once the view has been stable for the grace period.
    view_since: u64,
    /// Statistics of the accesses served here, the latency of client requests, occupancy.
    stats: Recorder,
    /// The busy time of the worker's thread, if the driver measures it.
    busy_meter: Option<BusyMeter>,
}

impl Core {
    /// A core around `shard` (whose clock it shares); everything random it does follows
    /// from `seed`.
    pub fn new(shard: Shard, config: CoreConfig, seed: u64) -> Core {
        let clock = shard.clock().clone();
        let mut rng = fastrand::Rng::with_seed(seed);
        let hasher = FixedState::with_seed(rng.u64(..));
        let now = clock.mono_ms();
        // Workers start their anti-entropy rounds at different times.
        let first_ae = now + rng.u64(0..=config.anti_entropy_period_ms);
        // Not drawn from `rng`: the statistics change none of the core's random choices.
        let stats = Recorder::new(config.stats.clone(), crate::stats::seed_from(seed), now);
        Core {
            shard,
            clock,
            effects: Vec::new(),
            next_id: 0,
            pending: Map::with_hasher(hasher.clone()),
            jobs: requests::Jobs::new(hasher.clone()),
            tier: tier::TierFetches::new(hasher.clone()),
            backing: backing::BackingState::new(hasher.clone(), now),
            writes: acks::Writes::new(hasher.clone()),
            syncs: Map::with_hasher(hasher.clone()),
            gossip: gossip::GossipState::default(),
            entropy: entropy::Entropy::new(hasher),
            reclaim: reclaim::Reclaimer::default(),
            timers: Timers {
                gossip: now + rng.u64(0..=config.gossip_period_ms),
                anti_entropy: first_ae,
                journal: None,
            },
            repairs: 0,
            entropy_sessions: 0,
            view_since: now,
            stats,
            busy_meter: None,
            rng,
            config,
        }
    }

    /// The shard (read-only: status, tests, the simulation's checks).
    pub fn shard(&self) -> &Shard {
        &self.shard
    }

    /// The shard, for the driver's direct uses: the zero-copy read path, subscriptions,
    /// snapshots, the write-ahead log's failures.
    pub fn shard_mut(&mut self) -> &mut Shard {
        &mut self.shard
    }

    /// Which replica this core is.
    pub fn me(&self) -> Replica {
        self.shard.me()
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// The effects produced since the last call, in order.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// True if effects are waiting to be taken.
    pub fn has_effects(&self) -> bool {
        !self.effects.is_empty()
    }

    /// Counters.
    pub fn stats(&self) -> CoreStats {
        CoreStats {
            shard: self.shard.stats(),
            batches_in_flight: self.gossip.in_flight as u64,
            requests_in_flight: self.pending.len() as u64,
            repairs: self.repairs,
            entropy_sessions: self.entropy_sessions,
            jobs: self.jobs.len() as u64,
            oldest_job: self.jobs.oldest(),
            last_id: self.next_id,
        }
    }

    /// The statistics of the last window that closed.
    pub fn window(&self) -> Arc<Window> {
        self.stats.window().clone()
    }

    /// `n` client requests were answered, each `ns` nanoseconds after it arrived (the
    /// driver measures; see `front::pipeline`).
    pub fn record_latency(&mut self, ns: u64, n: u32) {
        self.stats.latency(ns, n);
    }

    /// Gives the core a meter of its thread's busy time, for the occupancy in its
    /// statistics (without one, occupancy reads 0).
    pub fn set_busy_meter(&mut self, meter: BusyMeter) {
        self.stats.start_busy(meter());
        self.busy_meter = Some(meter);
    }

    /// Closes the statistics' period and publishes the window ending now.
    fn close_stats(&mut self, now: u64) {
        let gauges = Gauges {
            busy_ns: self.busy_meter.as_ref().map(|m| m()),
            memory_bytes: self.shard.memory_bytes(),
            disk_bytes: self.shard.disk_bytes(),
        };
        self.stats.close(now, gauges);
    }

    /// Switches to a new view of the cluster: moves keys as it implies (hand-off,
    /// re-replication) and, if the rings changed, runs anti-entropy with every other worker
    /// shortly after.
    pub fn set_view(&mut self, view: Arc<ViewState>) {
        if self.shard.view().version == view.version && self.shard.view().rings == view.rings {
            return;
        }
        let rings_changed = self.shard.view().rings != view.rings;
        self.view_since = self.now();
        self.shard.set_view(view);
        if rings_changed {
            // Keys this worker became the primary of: it does not know what the store has.
            self.shard.mark_backed_keys_dirty();
        }
        // Hand-offs go out now rather than at the next tick.
        self.gossip.urgent = true;
        if rings_changed {
            let at = self.now() + self.config.anti_entropy_after_view_ms;
            self.entropy_after_view(at);
        }
    }

    /// When [`tick`](Self::tick) should next run (monotonic ms of the core's clock).
    pub fn next_deadline(&self) -> u64 {
        let mut next = self.timers.gossip.min(self.timers.anti_entropy);
        if self.gossip.urgent {
            next = next.min(self.gossip.soonest);
        }
        if let Some(j) = self.timers.journal {
            next = next.min(j);
        }
        if let Some(e) = self.entropy.next_step() {
            next = next.min(e);
        }
        if let Some(r) = self.reclaim.next_step() {
            next = next.min(r);
        }
        if let Some(d) = self.pending.values().map(|p| p.deadline).min() {
            next = next.min(d);
        }
        if self.shard.reconciling() {
            // Between requests, as soon as they let it.
            next = next.min(self.now());
        }
        if let Some(b) = self.backing_deadline() {
            next = next.min(b);
        }
        next.min(self.stats.next_close())
    }

    /// Runs whatever is due: gossip, anti-entropy, moving changes to the log, timeouts.
    pub fn tick(&mut self) {
        let now = self.now();
        self.expire_requests(now);
        // Eviction steps between requests too (after acknowledgements made records clean).
        self.shard.maintain_memory();
        if self.shard.reconciling() {
            self.shard.reconcile_step(RECONCILE_STEP_ENTRIES);
            // The hand-offs it queued go out soon.
            self.gossip.urgent = true;
        }
        if now >= self.timers.gossip || (self.gossip.urgent && now >= self.gossip.soonest) {
            self.gossip_round(now);
        }
        if now >= self.timers.anti_entropy {
            self.timers.anti_entropy = now + self.config.anti_entropy_period_ms;
            self.entropy_with_random_peer();
        }
        self.entropy_step(now);
        self.reclaim_step(now);
        // Keys past their deadline, a bounded number per tick (see `shard::expiry`).
        self.shard.expire_step(crate::shard::EXPIRE_STEP_KEYS);
        self.pump_backing();
        if self.timers.journal.is_some_and(|j| now >= j) {
            self.flush_journal();
        }
        self.arm_journal();
        if now >= self.stats.next_close() {
            self.close_stats(now);
        }
    }

    /// Monotonic now.
    fn now(&self) -> u64 {
        self.clock.mono_ms()
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Moves queued changes to the log now (a snapshot covers what was logged before it).
    pub fn flush_journal_now(&mut self) {
        self.flush_journal();
    }

    /// At shutdown: a last gossip round, and what is queued for the log.
    pub fn flush(&mut self) {
        let now = self.now();
        self.gossip_round(now);
        self.flush_journal();
    }

    /// Moves queued changes to the log now (before a sync, so the sync covers them).
    fn flush_journal(&mut self) {
        self.timers.journal = None;
        let payloads = self.shard.take_journal();
        if !payloads.is_empty() {
            self.effects.push(Effect::Journal(payloads));
        }
    }

    /// Gives the log queue an emptied buffer of a payload the log has written, to build a
    /// next payload in without allocating.
    pub fn reuse_journal_buffer(&mut self, buf: Vec<u8>) {
        self.shard.reuse_journal_buffer(buf);
    }

    /// Schedules the next move of queued changes to the log, if any wait.
    fn arm_journal(&mut self) {
        if self.timers.journal.is_none() && self.shard.journal_pending() {
            self.timers.journal = Some(self.now() + self.config.journal_flush_ms);
        }
    }

    /// Notes that the write-ahead log refused an append (`Some(why)`: writes fail until it
    /// accepts appends again) or accepts them again (`None`).
    pub fn set_journal_failure(&mut self, why: Option<String>) {
        self.shard.set_journal_failure(why);
    }

    /// Asks the driver for a sync, after moving queued changes to the log.
    fn request_sync(&mut self, strict: bool, waiter: acks::SyncWaiter) {
        self.flush_journal();
        let id = SyncId(self.next_id());
        self.syncs.insert(id, waiter);
        self.effects.push(Effect::Sync { id, strict });
    }

    /// Sends `msg` to worker `to`, tracking the request with `waiting`.
    fn send(&mut self, to: Replica, msg: PeerMsg, waiting: gossip::Waiting) -> ReqId {
        let req = ReqId(self.next_id());
        let peer = if to.node == self.me().node {
            None
        } else if matches!(msg, PeerMsg::Fetch { .. }) {
            // Reads of moving keys ask their owners under the views still settling: one of
            // them may have left the current view, and serves what it holds until its
            // hand-off is done.
            self.shard.settling_peer_addr(to.node).map(str::to_string)
        } else {
            self.shard.view().peer_addr(to.node).map(str::to_string)
        };
        let deadline = self.now() + self.config.peer_timeout_ms;
        self.pending.insert(
            req,
            gossip::Pending {
                to,
                deadline,
                waiting,
            },
        );
        self.effects.push(Effect::Send { req, to, peer, msg });
        req
    }

    /// Answers a request from another worker.
    fn respond(&mut self, token: Token, result: Result<PeerReply, NodeError>) {
        self.effects.push(Effect::Respond { token, result });
    }

    /// Fails every request whose answer is overdue.
    fn expire_requests(&mut self, now: u64) {
        let mut overdue: Vec<ReqId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(r, _)| *r)
            .collect();
        if overdue.is_empty() {
            return;
        }
        overdue.sort();
        for req in overdue {
            if let Some(p) = self.pending.get(&req) {
                let to = p.to;
                self.effects.push(Effect::Unreachable { to });
            }
            self.on_reply(req, Err(PeerFailure::TimedOut));
        }
    }
}

#[cfg(test)]
mod backing_tests;
#[cfg(test)]
mod handoff_steps_tests;
#[cfg(test)]
mod settle_tests;
#[cfg(test)]
mod tier_tests;
