//! The simulated cluster: nodes whose workers are real replica cores, the network between
//! them, the agents that publish views, the clients, and the event loop that drives them in
//! simulated time.
//!
//! The simulator decides nothing a worker decides: it calls the cores (`submit`, `on_peer`,
//! `on_reply`, `set_view`, `tick` when their deadline comes) and carries out their effects —
//! a message to another worker of the same node goes through the (reliable) mesh, one to
//! another node crosses the network, encoded as the peer plane encodes it.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

use bytes::Bytes;
use fastrand::Rng;
use lattice::Timestamp;
use node::ack::Ack;
use node::clock::ManualClock;
use node::core::Routing;
use node::core::{
    Core, CoreConfig, Effect, PeerFailure, PeerMsg, PeerReply, PeerResult, ReqId, Submitted,
    SyncId, Token,
};
use node::error::NodeError;
use node::op::{Op, OpResult};
use node::shard::{Audit, Shard, ShardConfig};
use node::view::{default_vector, ReplicationTable, ViewState};
use node::Limits;
use placement::{node_key, NodeInfo, NodeKey, Replica, Replication, ReplicationVector, Tier};

use super::client::{derive, key_name, show_op, wrote, Loss, OpMaker, ReclaimRec, WriteRec};
use super::{FaultKind, Mode, Params, Report, Trace};

/// Records carried by one hand-off batch.
type Entries = Vec<(Bytes, lattice::Record)>;

/// Simulated wall clock at the start of every run (ms since the Unix epoch).
pub const EPOCH_MS: u64 = 1_700_000_000_000;
/// How long a leaving node may take to hand off its keys before the run fails, in ms.
const LEAVE_DEADLINE_MS: u64 = 20_000;
/// Leaving nodes check whether they are done every this many ms (as `leave` does).
const LEAVE_POLL_MS: u64 = 50;
/// Most simulated time spent waiting for quiescence after the active phase, in ms.
const QUIESCE_LIMIT_MS: u64 = 60_000;
/// Most events one run may handle (a guard against event storms).
const MAX_EVENTS: u64 = 5_000_000;

/// Life of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Running, in the rings.
    Up,
    /// Left the rings, handing its keys off; stops when done.
    Leaving,
    /// Crashed or stopped: no state, unreachable.
    Down,
}

/// One worker: a real core.
pub struct WorkerSim {
    /// The core.
    pub core: Core,
    /// When its tick is scheduled (simulated ms), if it is.
    tick_at: Option<u64>,
}

/// One node.
pub struct NodeSim {
    /// Its id.
    pub id: String,
    /// How views describe it.
    pub info: NodeInfo,
    /// Up, leaving or down.
    pub status: Status,
    /// Unique id of this incarnation (messages to an earlier one are not delivered).
    pub inc: u64,
    /// The clock of its workers.
    clock: Arc<ManualClock>,
    /// False until a freshly started node has reached another member.
    synced: bool,
    /// The ring members its agent believes in.
    belief: BTreeSet<NodeKey>,
    /// The version of the replication table its agent has.
    table_version: u64,
    /// The latest view its agent published.
    pub view: Arc<ViewState>,
    /// The workers.
    pub workers: Vec<WorkerSim>,
    /// When a leaving node must be done.
    leave_deadline: u64,
}

/// What everyone would agree on with perfect information.
#[derive(Default)]
pub struct Truth {
    /// Nodes in the rings (up, or crashed but not yet declared dead).
    pub members: BTreeSet<NodeKey>,
    /// Nodes that left gracefully (gone for good, unless they join again).
    pub left: BTreeSet<NodeKey>,
    /// Explicit replication vectors.
    pub table: BTreeMap<Box<[u8]>, (Timestamp, ReplicationVector)>,
    /// Bumped on every table change.
    pub table_version: u64,
}

/// A partition: the nodes of `side` cannot reach the others.
struct Partition {
    id: u64,
    side: BTreeSet<NodeKey>,
    start: u64,
}

/// What travels between workers.
enum Message {
    /// A request, with the id the sender tracks it by.
    Request { req: ReqId, msg: PeerMsg },
    /// The answer to request `req`.
    Reply { req: ReqId, result: PeerResult },
}

/// A message in flight.
struct Envelope {
    from: Replica,
    /// The sender's node incarnation (an answer to a restarted node is not delivered).
    from_inc: u64,
    to: Replica,
    to_inc: u64,
    message: Message,
}

/// Scheduled events.
enum Event {
    /// A message arrives.
    Deliver(Envelope),
    /// A request fails at once: its destination refused the connection.
    Refused {
        from: Replica,
        from_inc: u64,
        req: ReqId,
    },
    /// A worker's deadline.
    Tick(Replica, u64),
    /// A disk sync finishes (the simulation has no disk: at once, as durable as it gets).
    Synced(Replica, u64, SyncId, bool),
    /// A worker switches to its node's latest view.
    AdoptView(Replica, u64),
    /// A node's agent refreshes its membership.
    AgentTick(NodeKey, u64),
    /// A leaving node checks whether it is done.
    LeavePoll(NodeKey, u64),
    /// The cluster declares a crashed node dead.
    Detect(NodeKey, u64),
    /// A restarted node comes back.
    Rejoin(String),
    /// A partition heals.
    PartitionEnd(u64),
    /// A client writes.
    ClientWrite,
    /// A fault of the schedule.
    Fault(FaultKind),
}

/// An event at a time; ordered for a min-heap on (time, sequence).
struct Scheduled {
    at: u64,
    seq: u64,
    ev: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A request delivered to a worker and not yet answered: whom to answer.
struct Asked {
    asker: Replica,
    asker_inc: u64,
    req: ReqId,
}

/// The simulated cluster.
pub struct World {
    /// The run's parameters.
    pub p: Params,
    rng: Rng,
    /// Simulated ms since the start.
    pub now: u64,
    seq: u64,
    queue: BinaryHeap<Scheduled>,
    events: u64,
    /// Messages in flight between workers.
    in_flight: usize,
    /// Every node ever started, by key.
    pub nodes: BTreeMap<NodeKey, NodeSim>,
    worker_counts: BTreeMap<String, usize>,
    next_fresh: usize,
    /// Membership with perfect information.
    pub truth: Truth,
    partition: Option<Partition>,
    next_partition: u64,
    next_inc: u64,
    /// Requests being answered, by the token their worker was given.
    asked: BTreeMap<u64, Asked>,
    next_token: u64,
    ops: OpMaker,
    /// Every write executed.
    pub writes: Vec<WriteRec>,
    /// Every tombstone reclaimed.
    pub reclaims: Vec<ReclaimRec>,
    /// Hand-off batches in flight: (sender, request) → (destination, records).
    handoffs: BTreeMap<(Replica, u64), (Replica, Entries)>,
    /// What each worker's hand-offs were acknowledged with: (sender, key) → (replica,
    /// record) — observed on the network, to check every drop against.
    handoff_acks: BTreeMap<(Replica, Bytes), Vec<(Replica, lattice::Record)>>,
    /// Protocol properties found broken (the run fails).
    violations: Vec<String>,
    /// The trace.
    pub trace: Trace,
    healing: bool,
    /// Counts.
    pub report: Report,
}

impl World {
    /// A world for `p`, nothing started yet.
    pub fn new(p: Params) -> World {
        let echo = std::env::var("LATTICEKV_SIM_TRACE").is_ok_and(|v| v == "1");
        World {
            rng: Rng::with_seed(p.seed),
            p,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: 0,
            in_flight: 0,
            nodes: BTreeMap::new(),
            worker_counts: BTreeMap::new(),
            next_fresh: 0,
            truth: Truth::default(),
            partition: None,
            next_partition: 0,
            next_inc: 0,
            asked: BTreeMap::new(),
            next_token: 0,
            ops: OpMaker::default(),
            writes: Vec::new(),
            reclaims: Vec::new(),
            handoffs: BTreeMap::new(),
            handoff_acks: BTreeMap::new(),
            violations: Vec::new(),
            trace: Trace {
                echo,
                ..Trace::default()
            },
            healing: false,
            report: Report::default(),
        }
    }

    /// Runs the whole simulation: the active phase, healing, quiescence, the checks.
    pub fn run(&mut self) -> Result<Report, String> {
        let initial: Vec<String> = (0..self.p.initial_nodes).map(|i| format!("n{i}")).collect();
        self.next_fresh = initial.len();
        let keys: Vec<NodeKey> = initial.iter().map(|id| self.add_node(id)).collect();
        let all: BTreeSet<NodeKey> = keys.iter().copied().collect();
        for &nk in &keys {
            self.truth.members.insert(nk);
        }
        for &nk in &keys {
            self.start_node(nk, all.clone(), true);
        }
        self.trace.notable(
            0,
            format!(
                "cluster of {} (workers {:?})",
                initial.join(" "),
                keys.iter()
                    .map(|k| self.nodes[k].workers.len())
                    .collect::<Vec<_>>()
            ),
        );
        for (at, kind) in self.p.faults.clone() {
            self.schedule(at, Event::Fault(kind));
        }
        let first = self.rng.u64(1..=self.p.write_every_ms);
        self.schedule(first, Event::ClientWrite);

        self.run_until(self.p.active_ms)?;
        self.healing = true;
        self.partition = None;
        self.trace.notable(
            self.now,
            "active phase over: partitions healed, no loss".into(),
        );
        self.quiesce()?;
        super::check::final_checks(self)?;
        for node in self.nodes.values().filter(|n| n.status != Status::Down) {
            self.report.repairs += node
                .workers
                .iter()
                .map(|w| w.core.stats().repairs)
                .sum::<u64>();
        }
        self.report.events = self.events;
        self.report.fingerprint = self.fingerprint();
        Ok(self.report.clone())
    }

    /// Hash of every live worker's records (in key order) and of the history.
    fn fingerprint(&self) -> u64 {
        use prost::Message as _;
        let mut bytes = Vec::new();
        for node in self.nodes.values().filter(|n| n.status != Status::Down) {
            for w in &node.workers {
                let mut entries: Vec<(Vec<u8>, lattice::Record)> = w
                    .core
                    .shard()
                    .store()
                    .iter()
                    .map(|(k, r)| (k.to_vec(), r.to_record()))
                    .collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                for (k, r) in entries {
                    bytes.extend_from_slice(&k);
                    bytes.extend_from_slice(&wire::convert::record_to_pb(&r).encode_to_vec());
                }
            }
        }
        for w in &self.writes {
            bytes.extend_from_slice(format!("{}{}{}", w.at, w.time, show_op(&w.op)).as_bytes());
        }
        bytes.extend_from_slice(&self.events.to_le_bytes());
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }

    // ---- scheduling -----------------------------------------------------------------------

    fn schedule(&mut self, delay: u64, ev: Event) {
        self.schedule_at(self.now + delay, ev);
    }

    fn schedule_at(&mut self, at: u64, ev: Event) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at: at.max(self.now),
            seq: self.seq,
            ev,
        });
    }

    /// Handles events until simulated time `until`.
    pub fn run_until(&mut self, until: u64) -> Result<(), String> {
        while let Some(next) = self.queue.peek() {
            if next.at > until {
                break;
            }
            let Scheduled { at, ev, .. } = self.queue.pop().expect("peeked");
            self.now = at;
            self.events += 1;
            if self.events > MAX_EVENTS {
                return Err(format!("more than {MAX_EVENTS} events: an event storm"));
            }
            self.handle(ev)?;
            if let Some(v) = self.violations.first() {
                return Err(v.clone());
            }
        }
        self.now = self.now.max(until);
        Ok(())
    }

    fn handle(&mut self, ev: Event) -> Result<(), String> {
        match ev {
            Event::Deliver(env) => self.deliver(env),
            Event::Refused {
                from,
                from_inc,
                req,
            } => {
                let why = PeerFailure::Unreachable("connection refused".into());
                self.with_core(from, Some(from_inc), |c| c.on_reply(req, Err(why)));
                Ok(())
            }
            Event::Tick(r, inc) => {
                let now = self.now;
                let due = self.worker(r, inc).is_some_and(|w| w.tick_at == Some(now));
                if due {
                    if let Some(w) = self.worker(r, inc) {
                        w.tick_at = None;
                    }
                    self.with_core(r, Some(inc), Core::tick);
                }
                Ok(())
            }
            Event::Synced(r, inc, id, strict) => {
                let result = if strict {
                    Err(NodeError::Storage(
                        "the simulation has no durable storage".into(),
                    ))
                } else {
                    Ok(())
                };
                self.with_core(r, Some(inc), |c| c.on_synced(id, result));
                Ok(())
            }
            Event::AdoptView(r, inc) => {
                let Some(view) = self.nodes.get(&r.node).map(|n| n.view.clone()) else {
                    return Ok(());
                };
                self.with_core(r, Some(inc), |c| c.set_view(view));
                Ok(())
            }
            Event::AgentTick(nk, inc) => {
                if self.nodes[&nk].inc == inc && self.nodes[&nk].status != Status::Down {
                    self.refresh_belief(nk);
                    self.schedule(self.p.agent_ms, Event::AgentTick(nk, inc));
                }
                Ok(())
            }
            Event::LeavePoll(nk, inc) => self.leave_poll(nk, inc),
            Event::Detect(nk, inc) => {
                let node = &self.nodes[&nk];
                if node.inc == inc && node.status == Status::Down {
                    self.truth.members.remove(&nk);
                    let id = node.id.clone();
                    self.trace
                        .notable(self.now, format!("{id} is declared dead"));
                }
                Ok(())
            }
            Event::Rejoin(id) => {
                if self.nodes[&node_key(&id)].status != Status::Down {
                    // A join took the id in the meantime.
                    return Ok(());
                }
                let nk = self.add_node(&id);
                self.truth.members.insert(nk);
                self.truth.left.remove(&nk);
                self.start_node(nk, BTreeSet::from([nk]), false);
                self.trace
                    .notable(self.now, format!("{id} restarts with an empty store"));
                Ok(())
            }
            Event::PartitionEnd(id) => {
                if self.partition.as_ref().is_some_and(|p| p.id == id) {
                    self.partition = None;
                    self.trace.notable(self.now, "partition heals".into());
                }
                Ok(())
            }
            Event::ClientWrite => {
                if !self.healing {
                    self.client_write();
                    let next = self.rng.u64(1..=2 * self.p.write_every_ms);
                    self.schedule(next, Event::ClientWrite);
                }
                Ok(())
            }
            Event::Fault(kind) => {
                if !self.healing {
                    self.fault(kind)?;
                }
                Ok(())
            }
        }
    }

    // ---- nodes and workers ----------------------------------------------------------------

    /// "node/worker".
    pub fn name(&self, r: Replica) -> String {
        match self.nodes.get(&r.node) {
            Some(n) => format!("{}/{}", n.id, r.worker),
            None => format!("{:x}/{}", r.node, r.worker),
        }
    }

    /// Creates (or re-creates, for a restart) a node's entry, without workers.
    fn add_node(&mut self, id: &str) -> NodeKey {
        let nk = node_key(id);
        let workers = match self.worker_counts.get(id) {
            Some(&w) => w,
            None => {
                let w = self.rng.usize(1..=3);
                self.worker_counts.insert(id.to_string(), w);
                w
            }
        };
        let info = NodeInfo {
            id: id.to_string(),
            tier: Tier::Memory,
            workers: (0..workers).map(|w| format!("{id}/{w}")).collect(),
            front: format!("{id}/front"),
            resp: format!("{id}/resp"),
            peer: format!("{id}/peer"),
            vnodes: 16,
        };
        self.next_inc += 1;
        let clock = Arc::new(ManualClock::new(EPOCH_MS + self.now));
        clock.set_skew(self.rng.i64(-self.p.max_skew_ms..=self.p.max_skew_ms));
        let view = Arc::new(ViewState::of(
            vec![info.clone()],
            ReplicationTable::new(),
            self.default_vector(),
        ));
        self.nodes.insert(
            nk,
            NodeSim {
                id: id.to_string(),
                info,
                status: Status::Up,
                inc: self.next_inc,
                clock,
                synced: false,
                belief: BTreeSet::from([nk]),
                table_version: 0,
                view,
                workers: Vec::new(),
                leave_deadline: 0,
            },
        );
        nk
    }

    fn default_vector(&self) -> ReplicationVector {
        default_vector(self.p.global_rf, self.p.local_rf)
    }

    /// Builds the view of `members` with the current replication table; the nodes that are
    /// neither members nor gone for good (declared dead, or cut off) count as dead.
    fn build_view(&self, members: &BTreeSet<NodeKey>, version: u64) -> ViewState {
        let infos: Vec<NodeInfo> = members.iter().map(|m| self.nodes[m].info.clone()).collect();
        let table: ReplicationTable = self
            .truth
            .table
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let mut view = ViewState::of(infos, table, self.default_vector());
        view.version = version;
        view.dead = self
            .nodes
            .keys()
            .filter(|k| !members.contains(k) && !self.truth.left.contains(k))
            .count();
        view
    }

    /// Starts a node's workers with the view of `belief` (the whole cluster for the initial
    /// nodes; itself alone for a node that joins, as a starting agent knows only itself).
    fn start_node(&mut self, nk: NodeKey, belief: BTreeSet<NodeKey>, initial: bool) {
        let view = Arc::new(if initial {
            self.build_view(&belief, 0)
        } else {
            self.build_view(&BTreeSet::from([nk]), 0)
        });
        let workers = self.nodes[&nk].info.workers.len();
        let clock = self.nodes[&nk].clock.clone();
        clock.set(EPOCH_MS + self.now);
        let mut cores = Vec::with_capacity(workers);
        for w in 0..workers {
            let config = ShardConfig {
                me: Replica {
                    node: nk,
                    worker: w as u32,
                },
                limits: Limits::default(),
                memory_budget: 1 << 30,
                max_changeset_keys: self.p.max_changeset_keys,
                settle_ms: 1_000,
                tombstone_memory_ms: self.p.tombstone_grace_ms,
            };
            let mut shard = Shard::new(config, view.clone(), self.rng.u64(..), clock.clone());
            shard.audit();
            if self.p.mode == Mode::DropAfterFirstAck {
                shard.break_handoff();
            }
            let core_config = CoreConfig {
                gossip_period_ms: self.p.gossip_ms,
                anti_entropy_period_ms: self.p.anti_entropy_ms,
                anti_entropy_after_view_ms: 500,
                anti_entropy_bytes_per_sec: 32 << 20,
                peer_timeout_ms: self.p.timeout_ms,
                max_batches_in_flight: 64,
                backlog_pause_ms: 2,
                journal_flush_ms: 2,
                default_ack: Ack::MERGED,
                tombstone_grace_ms: self.p.tombstone_grace_ms,
                max_reply_bytes: 64 << 20,
                // The node's default statistics period: the core ticks at each close, as a
                // real node's does (the checks do not look at the statistics themselves).
                stats: node::stats::StatsConfig::default(),
            };
            let core_config = if self.p.mode == Mode::NoRetryNoAntiEntropy {
                CoreConfig {
                    anti_entropy_period_ms: u64::MAX / 4,
                    anti_entropy_after_view_ms: u64::MAX / 4,
                    ..core_config
                }
            } else {
                core_config
            };
            cores.push(WorkerSim {
                core: Core::new(shard, core_config, self.rng.u64(..)),
                tick_at: None,
            });
        }
        let node = self.nodes.get_mut(&nk).expect("node entry");
        node.status = Status::Up;
        node.synced = initial;
        node.belief = if initial {
            belief
        } else {
            BTreeSet::from([nk])
        };
        node.table_version = if initial { self.truth.table_version } else { 0 };
        node.view = view;
        node.workers = cores;
        let inc = node.inc;
        let agent = self.rng.u64(1..=self.p.agent_ms);
        self.schedule(agent, Event::AgentTick(nk, inc));
        for w in 0..workers {
            let r = Replica {
                node: nk,
                worker: w as u32,
            };
            self.with_core(r, Some(inc), |_| ());
        }
    }

    fn live(&self, nk: NodeKey) -> bool {
        self.nodes
            .get(&nk)
            .is_some_and(|n| n.status != Status::Down)
    }

    /// Worker `r` if its node is live (and is incarnation `inc`, if given).
    fn worker(&mut self, r: Replica, inc: u64) -> Option<&mut WorkerSim> {
        let node = self.nodes.get_mut(&r.node)?;
        if node.status == Status::Down || node.inc != inc {
            return None;
        }
        node.workers.get_mut(r.worker as usize)
    }

    /// Calls worker `r`'s core (of node incarnation `inc`, if given) on the node's clock,
    /// then carries out its effects and schedules its next tick.
    fn with_core<R>(
        &mut self,
        r: Replica,
        inc: Option<u64>,
        f: impl FnOnce(&mut Core) -> R,
    ) -> Option<R> {
        let now = self.now;
        let node = self.nodes.get_mut(&r.node)?;
        if node.status == Status::Down || inc.is_some_and(|i| i != node.inc) {
            return None;
        }
        let node_inc = node.inc;
        node.clock.set(EPOCH_MS + now);
        let w = node.workers.get_mut(r.worker as usize)?;
        let out = f(&mut w.core);
        let effects = w.core.take_effects();
        let audit = w.core.shard_mut().take_audit();
        let deadline = w.core.next_deadline().saturating_sub(EPOCH_MS).max(now);
        let reschedule = w.tick_at.is_none_or(|t| deadline < t);
        if reschedule {
            w.tick_at = Some(deadline);
        }
        if reschedule {
            self.schedule_at(deadline, Event::Tick(r, node_inc));
        }
        self.record(r, audit);
        for e in effects {
            self.effect(r, node_inc, e);
        }
        Some(out)
    }

    /// Records what a worker's shard did.
    fn record(&mut self, at: Replica, audit: Vec<Audit>) {
        let name = self.name(at);
        for a in audit {
            match a {
                Audit::Write {
                    key,
                    op,
                    before,
                    after,
                    actor,
                    replica,
                    result,
                } => {
                    if !wrote(&op, &result) {
                        continue;
                    }
                    let Some(post) = after else {
                        self.trace.notable(
                            self.now,
                            format!("{} at {name} left no record", show_op(&op)),
                        );
                        continue;
                    };
                    let (delta, effect) = match derive(&op, before.as_ref(), &post, actor) {
                        Ok(d) => d,
                        Err(e) => {
                            self.trace
                                .notable(self.now, format!("{} at {name}: {e}", show_op(&op)));
                            continue;
                        }
                    };
                    let id = self.writes.len();
                    let now = self.now;
                    self.trace.event(now, || {
                        format!(
                            "write #{id} {} at {name}{} epoch {:?}",
                            show_op(&op),
                            if replica { "" } else { " (not a replica)" },
                            delta.epoch
                        )
                    });
                    self.report.writes += 1;
                    self.report.misplaced_writes += u64::from(!replica);
                    self.writes.push(WriteRec {
                        id,
                        key,
                        at: name.clone(),
                        time: now,
                        op,
                        delta,
                        effect,
                        lost: None,
                        kept: None,
                    });
                }
                Audit::Dropped { key, record } => {
                    self.check_drop(at, &key, &record);
                    let now = self.now;
                    self.trace.event(now, || {
                        format!(
                            "{name} drops {} (handed off)",
                            String::from_utf8_lossy(&key)
                        )
                    });
                }
                Audit::Reclaimed { key, epoch } => {
                    let now = self.now;
                    self.trace.event(now, || {
                        format!(
                            "{name} reclaims {} at {epoch:?}",
                            String::from_utf8_lossy(&key)
                        )
                    });
                    self.report.reclaimed += 1;
                    self.reclaims.push(ReclaimRec {
                        key,
                        epoch,
                        time: now,
                    });
                }
            }
        }
    }

    /// A worker drops a key it handed off: every replica of the key under its view must
    /// have acknowledged a record covering the one dropped (observed on the network).
    fn check_drop(&mut self, at: Replica, key: &Bytes, record: &lattice::Record) {
        let view = self.nodes[&at.node].workers[at.worker as usize]
            .core
            .shard()
            .view()
            .clone();
        let acks = self.handoff_acks.get(&(at, key.clone()));
        for r in view.replicas(key) {
            if r == at {
                continue;
            }
            let acked = acks.is_some_and(|a| {
                a.iter()
                    .any(|(who, rec)| *who == r && super::client::covers(rec, record))
            });
            if !acked {
                self.violations.push(format!(
                    "{} dropped {} before replica {} acknowledged it",
                    self.name(at),
                    String::from_utf8_lossy(key),
                    self.name(r)
                ));
            }
        }
    }

    /// Carries out one effect of worker `r`.
    fn effect(&mut self, r: Replica, inc: u64, e: Effect) {
        match e {
            Effect::Send { req, to, msg, .. } => {
                if let PeerMsg::Replicate {
                    entries,
                    durable: true,
                } = &msg
                {
                    self.handoffs.insert((r, req.0), (to, entries.clone()));
                }
                self.send(r, inc, to, Message::Request { req, msg })
            }
            Effect::Respond { token, result } => {
                let Some(asked) = self.asked.remove(&token.0) else {
                    return;
                };
                let result = result.map_err(PeerFailure::Refused);
                let reply = Message::Reply {
                    req: asked.req,
                    result,
                };
                self.send_to(r, inc, asked.asker, asked.asker_inc, reply);
            }
            Effect::Complete { results, .. } => self.client_results(&results),
            Effect::Journal(_) | Effect::Unreachable { .. } => {}
            // The simulated nodes have no backing store.
            Effect::BackingApply { .. } | Effect::BackingFetch { .. } => {}
            Effect::Sync { id, strict } => {
                let delay = self.rng.u64(0..=1);
                self.schedule(delay, Event::Synced(r, inc, id, strict));
            }
        }
    }

    // ---- network --------------------------------------------------------------------------

    /// True if nodes `a` and `b` can talk (no partition between them).
    fn reachable(&self, a: NodeKey, b: NodeKey) -> bool {
        match &self.partition {
            Some(p) => a == b || p.side.contains(&a) == p.side.contains(&b),
            None => true,
        }
    }

    /// True if `a`'s agent considers `b` dead because a partition has separated them for
    /// longer than the failure detector waits.
    fn suspects(&self, a: NodeKey, b: NodeKey) -> bool {
        match &self.partition {
            Some(p) => !self.reachable(a, b) && self.now >= p.start + self.p.detect_ms,
            None => false,
        }
    }

    /// Sends a request from `from` to worker `to` (its current incarnation).
    fn send(&mut self, from: Replica, from_inc: u64, to: Replica, message: Message) {
        let dest = self
            .nodes
            .get(&to.node)
            .filter(|n| n.status != Status::Down && (to.worker as usize) < n.workers.len())
            .map(|n| n.inc);
        match dest {
            Some(to_inc) => self.send_to(from, from_inc, to, to_inc, message),
            None => {
                // Connection refused: the request certainly did not run.
                if let Message::Request { req, .. } = message {
                    self.report.messages += 1;
                    self.report.lost += 1;
                    self.schedule(
                        1,
                        Event::Refused {
                            from,
                            from_inc,
                            req,
                        },
                    );
                }
            }
        }
    }

    /// Sends a message to `to` of incarnation `to_inc`: through the mesh within a node
    /// (reliable), over the network between nodes (loss, duplication, delay, partitions),
    /// in the peer plane's encoding.
    fn send_to(
        &mut self,
        from: Replica,
        from_inc: u64,
        to: Replica,
        to_inc: u64,
        message: Message,
    ) {
        let kind = describe(&message);
        if from.node == to.node {
            if let Message::Request { req, .. } = &message {
                if self.rng.f64() < self.p.inbox_full {
                    // The worker's inbox is full: the send fails at once.
                    let req = *req;
                    self.schedule(
                        0,
                        Event::Refused {
                            from,
                            from_inc,
                            req,
                        },
                    );
                    return;
                }
            }
            self.in_flight += 1;
            let delay = self.rng.u64(0..=1);
            let env = Envelope {
                from,
                from_inc,
                to,
                to_inc,
                message,
            };
            self.schedule(delay, Event::Deliver(env));
            return;
        }
        let message = through_the_wire(message);
        self.report.messages += 1;
        let fate = if !self.reachable(from.node, to.node) {
            Some("partitioned")
        } else if !self.healing && self.rng.f64() < self.p.loss {
            Some("lost")
        } else {
            None
        };
        if let Some(fate) = fate {
            self.report.lost += 1;
            let (f, t) = (self.name(from), self.name(to));
            self.trace
                .event(self.now, || format!("{kind} {f} -> {t} {fate}"));
            // The broken modes: a lost batch is acknowledged anyway.
            if let (
                Mode::AckOnTimeout | Mode::NoRetryNoAntiEntropy,
                Message::Request {
                    req,
                    msg: PeerMsg::Replicate { entries, .. },
                },
            ) = (self.p.mode, &message)
            {
                let reply = Message::Reply {
                    req: *req,
                    result: Ok(PeerReply::Ack(entries.len() as u64)),
                };
                let delay = self.rng.u64(1..=self.p.max_delay_ms);
                self.in_flight += 1;
                let env = Envelope {
                    from: to,
                    from_inc: to_inc,
                    to: from,
                    to_inc: from_inc,
                    message: reply,
                };
                self.schedule(delay, Event::Deliver(env));
            }
            return;
        }
        let copies = if !self.healing && self.rng.f64() < self.p.dup {
            self.report.duplicated += 1;
            2
        } else {
            1
        };
        let delay = self.rng.u64(1..=self.p.max_delay_ms);
        self.in_flight += 1;
        let env = Envelope {
            from,
            from_inc,
            to,
            to_inc,
            message,
        };
        if copies == 2 {
            let again = clone_message(&env.message);
            let delay2 = self.rng.u64(1..=self.p.max_delay_ms);
            self.in_flight += 1;
            self.schedule(
                delay2,
                Event::Deliver(Envelope {
                    from,
                    from_inc,
                    to,
                    to_inc,
                    message: again,
                }),
            );
        }
        self.schedule(delay, Event::Deliver(env));
    }

    fn deliver(&mut self, env: Envelope) -> Result<(), String> {
        self.in_flight -= 1;
        if !self.reachable(env.from.node, env.to.node) {
            return Ok(());
        }
        let (from, to) = (env.from, env.to);
        let kind = describe(&env.message);
        let (f, t) = (self.name(from), self.name(to));
        self.trace
            .event(self.now, || format!("{kind} {f} -> {t} delivered"));
        match env.message {
            Message::Request { req, msg } => {
                self.next_token += 1;
                let token = self.next_token;
                self.asked.insert(
                    token,
                    Asked {
                        asker: from,
                        asker_inc: env.from_inc,
                        req,
                    },
                );
                let handled =
                    self.with_core(to, Some(env.to_inc), |c| c.on_peer(from, msg, Token(token)));
                if handled.is_none() {
                    self.asked.remove(&token);
                }
            }
            Message::Reply { req, result } => {
                let handoff = self.handoffs.remove(&(to, req.0));
                if result.is_ok() {
                    if let Some((replica, entries)) = handoff {
                        for (key, record) in entries {
                            self.handoff_acks
                                .entry((to, key))
                                .or_default()
                                .push((replica, record));
                        }
                    }
                }
                self.with_core(to, Some(env.to_inc), |c| c.on_reply(req, result));
            }
        }
        Ok(())
    }
}

/// A message's kind, for the trace.
fn describe(m: &Message) -> String {
    match m {
        Message::Request { msg, .. } => match msg {
            PeerMsg::Replicate { entries, durable } => {
                format!(
                    "replicate({}{})",
                    entries.len(),
                    if *durable { ", durable" } else { "" }
                )
            }
            other => other.name().to_string(),
        },
        Message::Reply { result, .. } => match result {
            Ok(_) => "answer".into(),
            Err(e) => format!("failure {e:?}"),
        },
    }
}

/// A message as the other node decodes it: requests and answers between nodes cross the
/// peer plane's protobuf encoding.
fn through_the_wire(m: Message) -> Message {
    match m {
        Message::Request { req, msg } => {
            let pb = node::peer::convert::request_to_pb(req.0, msg);
            match node::peer::convert::request_from_pb(pb) {
                Ok((id, msg)) => Message::Request {
                    req: ReqId(id),
                    msg,
                },
                Err(e) => panic!("a request does not decode: {e}"),
            }
        }
        Message::Reply { req, result } => {
            let pb = node::peer::convert::response_to_pb(
                req.0,
                result.map_err(|f| match f {
                    PeerFailure::Refused(e) => e,
                    other => other.to_error("answer"),
                }),
            );
            let (id, result) = node::peer::convert::response_from_pb(pb);
            Message::Reply {
                req: ReqId(id),
                result,
            }
        }
    }
}

fn clone_message(m: &Message) -> Message {
    match m {
        Message::Request { req, msg } => Message::Request {
            req: *req,
            msg: msg.clone(),
        },
        Message::Reply { req, result } => Message::Reply {
            req: *req,
            result: result.clone(),
        },
    }
}

impl World {
    // ---- agents ---------------------------------------------------------------------------

    /// The agent's periodic refresh: the members it can hear about, the replication table.
    fn refresh_belief(&mut self, nk: NodeKey) {
        let node = &self.nodes[&nk];
        let mut members: BTreeSet<NodeKey> = self
            .truth
            .members
            .iter()
            .copied()
            .filter(|&m| m == nk || !self.suspects(nk, m))
            .collect();
        if node.status == Status::Leaving {
            members.remove(&nk);
        }
        if !node.synced {
            // A starting agent knows only itself until it reaches a member (if there is
            // anyone to reach).
            let others: Vec<NodeKey> = self
                .truth
                .members
                .iter()
                .copied()
                .filter(|&m| m != nk && self.live(m) && self.nodes[&m].synced)
                .collect();
            if !others.is_empty() && !others.iter().any(|&m| self.reachable(nk, m)) {
                return;
            }
        }
        let dead_changed = self.build_view(&members, 0).dead != node.view.dead;
        if members == node.belief && self.truth.table_version == node.table_version && !dead_changed
        {
            if !node.synced {
                self.nodes.get_mut(&nk).expect("node").synced = true;
            }
            return;
        }
        self.publish(nk, members);
    }

    fn publish(&mut self, nk: NodeKey, members: BTreeSet<NodeKey>) {
        let version = self.nodes[&nk].view.version + 1;
        let view = Arc::new(self.build_view(&members, version));
        let names: Vec<&str> = members.iter().map(|m| self.nodes[m].id.as_str()).collect();
        let what = format!(
            "{} publishes view {version}: [{}] with {} explicit vectors{}",
            self.nodes[&nk].id,
            names.join(" "),
            self.truth.table.len(),
            if view.dead > 0 {
                format!(", {} dead", view.dead)
            } else {
                String::new()
            }
        );
        self.trace.notable(self.now, what);
        self.report.views += 1;
        let table_version = self.truth.table_version;
        let node = self.nodes.get_mut(&nk).expect("node");
        node.synced = true;
        node.view = view;
        node.belief = members;
        node.table_version = table_version;
        let inc = node.inc;
        for w in 0..node.workers.len() {
            let delay = self.rng.u64(0..=3);
            let r = Replica {
                node: nk,
                worker: w as u32,
            };
            self.schedule(delay, Event::AdoptView(r, inc));
        }
    }

    // ---- clients --------------------------------------------------------------------------

    fn client_write(&mut self) {
        let ups: Vec<NodeKey> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.status == Status::Up)
            .map(|(k, _)| *k)
            .collect();
        if ups.is_empty() {
            return;
        }
        // The client learned the cluster from some node (its view may be stale).
        let view = self.nodes[&ups[self.rng.usize(..ups.len())]].view.clone();
        let k = self.rng.usize(..self.p.keys);
        let op = self.ops.make(&mut self.rng, k);
        let ack = Ack {
            replicas: if self.rng.f64() < self.p.sync_fraction {
                2
            } else {
                1
            },
            durable: false,
        };
        if self.rng.f64() < self.p.front_fraction {
            // The front port of a node of its view; the node hands it to some worker, which
            // forwards what it does not hold.
            let mut nodes: Vec<NodeKey> = view.view.nodes().map(|(k, _)| *k).collect();
            nodes.sort();
            let nk = nodes[self.rng.usize(..nodes.len())];
            if !self.live(nk) {
                return;
            }
            let workers = self.nodes[&nk].workers.len();
            let w = Replica {
                node: nk,
                worker: self.rng.usize(..workers) as u32,
            };
            self.submit(w, op, ack, Routing::Forward);
        } else {
            // A replica's own port; redirects are followed a few times.
            let replicas = view.replicas(op.key());
            if replicas.is_empty() {
                return;
            }
            let mut target = replicas[self.rng.usize(..replicas.len())];
            for _ in 0..3 {
                let live = self.nodes.get(&target.node).is_some_and(|n| {
                    n.status != Status::Down && n.workers.len() > target.worker as usize
                });
                if !live {
                    return;
                }
                match self.submit(target, op.clone(), ack, Routing::Redirect) {
                    Some(redirect) if !redirect.is_empty() => {
                        target = redirect[self.rng.usize(..redirect.len())];
                    }
                    _ => return,
                }
            }
        }
    }

    /// Submits a client op to worker `w`; returns the replicas of a redirect.
    fn submit(
        &mut self,
        w: Replica,
        op: Op<Bytes>,
        ack: Ack,
        routing: Routing,
    ) -> Option<Vec<Replica>> {
        let key = op.key_bytes().clone();
        let submitted = self.with_core(w, None, |c| c.submit(vec![op], ack, routing))?;
        match submitted {
            Submitted::Done(results) => {
                if let Some(OpResult::Error(NodeError::Redirect(_))) = results.first() {
                    let view = self.nodes[&w.node].workers[w.worker as usize]
                        .core
                        .shard()
                        .view()
                        .clone();
                    return Some(view.serving_replicas(&key));
                }
                self.client_results(&results);
                None
            }
            Submitted::Pending(_) => None,
        }
    }

    fn client_results(&mut self, results: &[OpResult]) {
        for r in results {
            if !matches!(r, OpResult::Error(_)) {
                self.report.acked += 1;
            }
        }
    }

    // ---- faults ---------------------------------------------------------------------------

    fn up_nodes(&self) -> Vec<NodeKey> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.status == Status::Up)
            .map(|(k, _)| *k)
            .collect()
    }

    fn fault(&mut self, kind: FaultKind) -> Result<(), String> {
        let ups = self.up_nodes();
        match kind {
            FaultKind::Join => {
                if ups.len() >= self.p.max_nodes {
                    return Ok(());
                }
                let down: Vec<String> = self
                    .nodes
                    .values()
                    .filter(|n| n.status == Status::Down)
                    .map(|n| n.id.clone())
                    .collect();
                let id = if !down.is_empty() && self.rng.bool() {
                    down[self.rng.usize(..down.len())].clone()
                } else {
                    self.next_fresh += 1;
                    format!("n{}", self.next_fresh - 1)
                };
                let nk = self.add_node(&id);
                self.truth.members.insert(nk);
                self.truth.left.remove(&nk);
                self.start_node(nk, BTreeSet::from([nk]), false);
                self.report.joins += 1;
                let workers = self.nodes[&nk].workers.len();
                self.trace
                    .notable(self.now, format!("{id} joins with {workers} workers"));
            }
            FaultKind::Leave => {
                // A node that has not joined the cluster yet cannot leave it.
                let synced: Vec<NodeKey> = ups
                    .iter()
                    .copied()
                    .filter(|k| self.nodes[k].synced)
                    .collect();
                if ups.len() < 2 || synced.is_empty() {
                    return Ok(());
                }
                let nk = synced[self.rng.usize(..synced.len())];
                let node = self.nodes.get_mut(&nk).expect("node");
                node.status = Status::Leaving;
                node.leave_deadline = self.now + LEAVE_DEADLINE_MS;
                let (id, inc) = (node.id.clone(), node.inc);
                self.truth.members.remove(&nk);
                self.truth.left.insert(nk);
                self.trace.notable(self.now, format!("{id} leaves"));
                // agent.leave(): out of its own rings at once, then it tells the others.
                self.refresh_belief(nk);
                self.schedule(3 * self.p.agent_ms, Event::LeavePoll(nk, inc));
            }
            FaultKind::Fail | FaultKind::Restart => {
                // One node stays up (a leaving node may crash too).
                let candidates: Vec<NodeKey> = self
                    .nodes
                    .iter()
                    .filter(|(_, n)| n.status != Status::Down)
                    .map(|(k, _)| *k)
                    .collect();
                if ups.len() < 2 {
                    return Ok(());
                }
                let nk = candidates[self.rng.usize(..candidates.len())];
                let id = self.nodes[&nk].id.clone();
                self.crash(nk, kind == FaultKind::Restart);
                if kind == FaultKind::Restart {
                    self.report.restarts += 1;
                    let after = self.rng.u64(20..=600);
                    self.schedule(after, Event::Rejoin(id));
                }
            }
            FaultKind::Partition => {
                if self.partition.is_some() {
                    return Ok(());
                }
                let mut live: Vec<NodeKey> = self
                    .nodes
                    .iter()
                    .filter(|(_, n)| n.status != Status::Down)
                    .map(|(k, _)| *k)
                    .collect();
                if live.len() < 2 {
                    return Ok(());
                }
                self.rng.shuffle(&mut live);
                let cut = self.rng.usize(1..live.len());
                let side: BTreeSet<NodeKey> = live[..cut].iter().copied().collect();
                let duration = self
                    .rng
                    .u64(self.p.min_partition_ms..=self.p.max_partition_ms);
                self.start_partition(side, duration);
            }
            FaultKind::SetVector => {
                let key = key_name(self.rng.usize(..self.p.keys));
                let vector = ReplicationVector {
                    memory: Replication {
                        global: self.rng.u32(1..=3),
                        local: self.rng.u32(1..=2),
                    },
                    disk: Replication {
                        global: 0,
                        local: 0,
                    },
                };
                self.truth.table_version += 1;
                let ts = Timestamp::new((EPOCH_MS + self.now) << 16 | self.truth.table_version, 0);
                self.truth.table.insert(Box::from(&key[..]), (ts, vector));
                self.report.vectors += 1;
                self.trace.notable(
                    self.now,
                    format!(
                        "replication of {} set to {}x{}",
                        String::from_utf8_lossy(&key),
                        vector.memory.global,
                        vector.memory.local
                    ),
                );
            }
        }
        Ok(())
    }

    /// Cuts the nodes of `side` off from the others for `duration` ms.
    pub fn start_partition(&mut self, side: BTreeSet<NodeKey>, duration: u64) {
        self.next_partition += 1;
        let id = self.next_partition;
        let names: Vec<&str> = side.iter().map(|k| self.nodes[k].id.as_str()).collect();
        self.trace.notable(
            self.now,
            format!("partition: [{}] cut off for {duration}ms", names.join(" ")),
        );
        self.partition = Some(Partition {
            id,
            side,
            start: self.now,
        });
        self.report.partitions += 1;
        self.schedule(duration, Event::PartitionEnd(id));
    }

    /// A node crashes: its state is gone. Writes whose every copy was there are lost.
    fn crash(&mut self, nk: NodeKey, restart: bool) {
        let node = self.nodes.get_mut(&nk).expect("node");
        let was_member = self.truth.members.contains(&nk);
        node.status = Status::Down;
        self.report.repairs += node
            .workers
            .iter()
            .map(|w| w.core.stats().repairs)
            .sum::<u64>();
        node.workers.clear();
        let (id, inc) = (node.id.clone(), node.inc);
        self.report.failures += 1;
        self.trace.notable(
            self.now,
            format!(
                "{id} crashes{}",
                if restart { " (will restart)" } else { "" }
            ),
        );
        super::check::mark_lost(self, Loss::Crash(format!("{id} crashed at {}ms", self.now)));
        if was_member {
            self.schedule(self.p.detect_ms, Event::Detect(nk, inc));
        }
    }

    /// A leaving node stops once every worker has handed everything off.
    fn leave_poll(&mut self, nk: NodeKey, inc: u64) -> Result<(), String> {
        let node = &self.nodes[&nk];
        if node.inc != inc || node.status != Status::Leaving {
            return Ok(());
        }
        let stats: Vec<_> = node.workers.iter().map(|w| w.core.stats()).collect();
        if stats.iter().all(|s| s.handed_everything_off()) {
            let id = node.id.clone();
            let node = self.nodes.get_mut(&nk).expect("node");
            node.status = Status::Down;
            self.report.repairs += node
                .workers
                .iter()
                .map(|w| w.core.stats().repairs)
                .sum::<u64>();
            node.workers.clear();
            self.report.leaves += 1;
            self.trace
                .notable(self.now, format!("{id} has handed off its keys and stops"));
            super::check::mark_lost(self, Loss::Leave(format!("{id} left at {}ms", self.now)));
            return Ok(());
        }
        if self.now >= node.leave_deadline {
            let mut keys: Vec<String> = Vec::new();
            for (w, sh) in node.workers.iter().enumerate() {
                for (k, r) in sh.core.shard().store().iter() {
                    keys.push(format!(
                        "{}{} on worker {w}",
                        String::from_utf8_lossy(k),
                        if r.is_live() { "" } else { " (tombstone)" }
                    ));
                }
            }
            keys.sort();
            return Err(format!(
                "{} has not handed everything off {LEAVE_DEADLINE_MS}ms after leaving \
                 ({stats:?}); keys: {}",
                node.id,
                keys.join(", ")
            ));
        }
        self.schedule(LEAVE_POLL_MS, Event::LeavePoll(nk, inc));
        Ok(())
    }

    // ---- quiescence -----------------------------------------------------------------------

    /// After the active phase: runs until nothing is left to do and every pair of workers
    /// agrees (anti-entropy would repair nothing).
    fn quiesce(&mut self) -> Result<(), String> {
        let start = self.now;
        loop {
            self.run_until(self.now + 50)?;
            let why = self.busy().or_else(|| self.diverged());
            let Some(why) = why else {
                self.report.quiesce_ms = self.now - start;
                self.trace.notable(self.now, "quiescent".into());
                return Ok(());
            };
            if self.now > start + QUIESCE_LIMIT_MS {
                return Err(format!(
                    "not quiescent {QUIESCE_LIMIT_MS}ms after the active phase: {why}"
                ));
            }
        }
    }

    /// What is still going on, if anything: leaves, membership or views not settled,
    /// replication or hand-offs still owed.
    fn busy(&mut self) -> Option<String> {
        for node in self.nodes.values() {
            match node.status {
                Status::Down => continue,
                Status::Leaving => return Some(format!("{} is still leaving", node.id)),
                Status::Up => {}
            }
            if node.belief != self.truth.members || node.table_version != self.truth.table_version {
                return Some(format!("{}'s membership is not up to date", node.id));
            }
            for (w, sh) in node.workers.iter().enumerate() {
                if sh.core.shard().view().version != node.view.version {
                    return Some(format!("{}/{w} has not switched views", node.id));
                }
                let stats = sh.core.stats();
                if stats.shard.pending_replication > 0 {
                    let view = sh.core.shard().view();
                    let handoffs: Vec<String> = sh
                        .core
                        .shard()
                        .pending_handoffs()
                        .iter()
                        .take(4)
                        .map(|(k, acked)| {
                            let name = |r: &Replica| match self.nodes.get(&r.node) {
                                Some(n) => format!("{}/{}", n.id, r.worker),
                                None => format!("{r:?}"),
                            };
                            format!(
                                "{} acked by [{}] of [{}]",
                                String::from_utf8_lossy(k),
                                acked.iter().map(name).collect::<Vec<_>>().join(" "),
                                view.replicas(k)
                                    .iter()
                                    .map(name)
                                    .collect::<Vec<_>>()
                                    .join(" ")
                            )
                        })
                        .collect();
                    return Some(format!(
                        "{}/{w} still owes replication ({stats:?}; hand-offs: {})",
                        node.id,
                        handoffs.join("; ")
                    ));
                }
            }
        }
        None
    }

    /// A reason anti-entropy would still repair something, if any: replicas of a key
    /// holding different records, or two workers whose digests differ. (Anti-entropy
    /// off: never.)
    fn diverged(&mut self) -> Option<String> {
        if self.p.mode == Mode::NoRetryNoAntiEntropy {
            return None;
        }
        if let Err(e) = super::check::replicas_agree(self) {
            return Some(e);
        }
        let workers: Vec<Replica> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.status == Status::Up)
            .flat_map(|(&node, n)| {
                (0..n.workers.len() as u32).map(move |worker| Replica { node, worker })
            })
            .collect();
        for (i, &a) in workers.iter().enumerate() {
            for &b in &workers[i + 1..] {
                let da = self.core(a).shard().digest(b);
                let db = self.core(b).shard().digest(a);
                if da != db {
                    return Some(format!(
                        "digests of {} and {} differ",
                        self.name(a),
                        self.name(b)
                    ));
                }
            }
        }
        None
    }

    /// The core of live worker `r`.
    pub fn core(&self, r: Replica) -> &Core {
        &self.nodes[&r.node].workers[r.worker as usize].core
    }

    /// Every copy of `keys` the cluster would still deliver (see `check`): in live workers'
    /// stores, and in messages between workers of a live node (the mesh is reliable).
    #[allow(clippy::type_complexity)]
    pub fn copies_of(
        &self,
        keys: &BTreeSet<Bytes>,
    ) -> BTreeMap<Bytes, Vec<(String, lattice::Record)>> {
        let mut out: BTreeMap<Bytes, Vec<(String, lattice::Record)>> = BTreeMap::new();
        for node in self.nodes.values().filter(|n| n.status != Status::Down) {
            for (w, sh) in node.workers.iter().enumerate() {
                for k in keys {
                    if let Some(r) = sh.core.shard().store().get(k) {
                        out.entry(k.clone())
                            .or_default()
                            .push((format!("the store of {}/{w}", node.id), r.to_record()));
                    }
                }
            }
        }
        for s in self.queue.iter() {
            let Event::Deliver(env) = &s.ev else { continue };
            let live = self
                .nodes
                .get(&env.to.node)
                .is_some_and(|n| n.status != Status::Down && n.inc == env.to_inc);
            if env.from.node != env.to.node || !live {
                continue;
            }
            if let Message::Request {
                msg: PeerMsg::Replicate { entries, .. },
                ..
            } = &env.message
            {
                for (k, r) in entries {
                    if keys.contains(k) {
                        out.entry(k.clone()).or_default().push((
                            format!(
                                "a message from {} to {}",
                                self.name(env.from),
                                self.name(env.to)
                            ),
                            r.clone(),
                        ));
                    }
                }
            }
        }
        out
    }
}
