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

use super::client::{
    derive, key_name, show_op, stays_live, wrote, Loss, OpMaker, ReclaimRec, WriteRec,
};
use super::{FaultKind, Mode, Params, Report, Trace};
use clients::{Asking, TicketKey};

mod clients;
mod faults;
mod net;
mod nodes;
mod quiesce;

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
    /// A leaving node's progress, decided as the node decides it.
    leave: Option<node::leave::LeaveProgress>,
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
    /// A client reads.
    ClientRead,
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
    /// Placement version of each node id (kept across restarts, as its worker count).
    placements: BTreeMap<String, u32>,
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
    /// Client requests waiting for their answers.
    waiting: BTreeMap<TicketKey, Asking>,
    /// Answers that came before the client knew their ticket (while the effects of its
    /// submission were carried out), until it does.
    unclaimed: BTreeMap<TicketKey, Vec<OpResult>>,
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
            placements: BTreeMap::new(),
            next_fresh: 0,
            truth: Truth::default(),
            partition: None,
            next_partition: 0,
            next_inc: 0,
            asked: BTreeMap::new(),
            next_token: 0,
            ops: OpMaker::default(),
            waiting: BTreeMap::new(),
            unclaimed: BTreeMap::new(),
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
        if let Some(reads) = self.p.reads {
            self.schedule(reads.from_ms, Event::ClientRead);
        }

        self.run_until(self.p.active_ms)?;
        self.healing = true;
        self.partition = None;
        self.trace.notable(
            self.now,
            "active phase over: partitions healed, no loss".into(),
        );
        self.quiesce()?;
        self.unanswered()?;
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
                if !self.healing && self.now < self.p.writes_until_ms {
                    self.client_write();
                    let next = self.rng.u64(1..=2 * self.p.write_every_ms);
                    self.schedule(next, Event::ClientWrite);
                }
                Ok(())
            }
            Event::ClientRead => {
                let Some(reads) = self.p.reads else {
                    return Ok(());
                };
                if !self.healing && self.now < reads.until_ms {
                    self.client_read();
                    let next = self.rng.u64(1..=2 * reads.every_ms);
                    self.schedule(next, Event::ClientRead);
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
}
