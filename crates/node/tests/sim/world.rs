//! The simulated cluster: nodes of real shards, the network, the agents, the clients, and
//! the event loop that drives them in simulated time.

use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use fastrand::Rng;
use lattice::{Counter, Lattice, Max, OrSet, Record, Set, Timestamp, Value};
use node::cluster::{default_vector, ReplicationTable, ViewState};
use node::mesh::WorkerStats;
use node::op::{Condition, Op, OpResult};
use node::shard::{GossipBatch, Outgoing, Route, Shard, ShardConfig};
use node::worker::{decode_entries, encode_entries};
use node::Limits;
use placement::{node_key, NodeInfo, NodeKey, Replica, Replication, ReplicationVector, Tier};
use wire::pb;

use super::{FaultKind, Mode, Params, Report, Trace};

thread_local! {
    /// Simulated wall-clock time (ms since the Unix epoch) of the event being handled.
    static NOW: Cell<u64> = const { Cell::new(0) };
    /// Clock skew of the node whose shard is being called.
    static SKEW: Cell<i64> = const { Cell::new(0) };
}

/// The shards' clock: simulated time plus the skew of the shard's node.
fn sim_clock() -> u64 {
    NOW.get().saturating_add_signed(SKEW.get())
}

/// Simulated wall clock at the start of every run (ms since the Unix epoch).
const EPOCH_MS: u64 = 1_700_000_000_000;
/// Most replication batches a worker has in flight to other nodes (`MAX_REMOTE_BATCHES`).
const MAX_REMOTE_BATCHES: usize = 64;
/// How long a leaving node may take to hand off its keys before the run fails, in ms.
const LEAVE_DEADLINE_MS: u64 = 10_000;
/// Leaving nodes check whether they are done every this many ms (`server::leave`).
const LEAVE_POLL_MS: u64 = 50;
/// Tombstone grace: longer than any run, so tombstones are never collected (a collected
/// tombstone may legitimately let an older write reappear, which the checks would flag).
const TOMBSTONE_GRACE_MS: u64 = 3_600_000;
/// Most simulated time spent waiting for quiescence after the active phase, in ms.
const QUIESCE_LIMIT_MS: u64 = 60_000;
/// Most events one run may handle (a guard against event storms).
const MAX_EVENTS: u64 = 3_000_000;

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

/// One worker: a real shard and the worker-loop state around it.
pub struct ShardSim {
    /// The shard.
    pub shard: Shard,
    /// Unique id of this incarnation of the worker (timers and replies of a dead one are
    /// ignored).
    pub inc: u64,
    /// Replication batches in flight to other nodes.
    remote_batches: usize,
    /// An anti-entropy exchange is under way.
    ae_busy: bool,
    /// Entries requeued into the changeset since the last gossip round (the simulator's
    /// copy, to know where data still is when a node crashes).
    pub retry: Vec<(Bytes, Record)>,
}

/// One node.
pub struct NodeSim {
    /// Its id.
    pub id: String,
    /// How views describe it.
    pub info: NodeInfo,
    /// Up, leaving or down.
    pub status: Status,
    /// Unique id of this incarnation.
    pub inc: u64,
    /// Clock skew, ms.
    skew: i64,
    /// False until a freshly started node has reached another member (its agent only
    /// knows itself until then).
    synced: bool,
    /// The ring members its agent believes in.
    belief: BTreeSet<NodeKey>,
    /// The version of the replication table its agent has.
    table_version: u64,
    /// The latest view its agent published.
    pub view: Arc<ViewState>,
    /// Version of `view`.
    view_version: u64,
    /// The workers.
    pub shards: Vec<ShardSim>,
    /// When a leaving node must be done.
    leave_deadline: u64,
}

/// What everyone would agree on with perfect information: the ring members and the
/// explicit replication vectors.
#[derive(Default)]
pub struct Truth {
    /// Nodes in the rings (up, or crashed but not yet declared dead).
    pub members: BTreeSet<NodeKey>,
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

/// A client operation (what travels in forwards, before it becomes a [`Op`]).
#[derive(Clone, Debug)]
pub enum ClientOp {
    /// LWW assignment.
    Assign {
        key: Bytes,
        value: Bytes,
        condition: Condition,
    },
    /// Delete.
    Delete { key: Bytes },
    /// Counter increment.
    CounterAdd { key: Bytes, delta: i64 },
    /// OR-set add of one member.
    SetAdd { key: Bytes, member: Bytes },
    /// OR-set remove of one member.
    SetRemove { key: Bytes, member: Bytes },
    /// Merge a Max register.
    PutMax { key: Bytes, value: i64 },
    /// Merge a grow-only set of one member.
    PutSet { key: Bytes, member: Bytes },
}

impl ClientOp {
    /// The key.
    pub fn key(&self) -> &Bytes {
        match self {
            ClientOp::Assign { key, .. }
            | ClientOp::Delete { key }
            | ClientOp::CounterAdd { key, .. }
            | ClientOp::SetAdd { key, .. }
            | ClientOp::SetRemove { key, .. }
            | ClientOp::PutMax { key, .. }
            | ClientOp::PutSet { key, .. } => key,
        }
    }

    /// The node's operation.
    fn to_op(&self) -> Op<Bytes> {
        match self.clone() {
            ClientOp::Assign {
                key,
                value,
                condition,
            } => Op::Assign {
                key,
                value,
                condition,
            },
            ClientOp::Delete { key } => Op::Delete { key },
            ClientOp::CounterAdd { key, delta } => Op::CounterAdd { key, delta },
            ClientOp::SetAdd { key, member } => Op::SetAdd {
                key,
                members: vec![member],
            },
            ClientOp::SetRemove { key, member } => Op::SetRemove {
                key,
                members: vec![member],
            },
            ClientOp::PutMax { key, value } => Op::Put {
                key,
                value: Value::Max(Max(value)),
            },
            ClientOp::PutSet { key, member } => Op::Put {
                key,
                value: Value::Set([Box::from(&member[..])].into_iter().collect()),
            },
        }
    }

    /// True if the result means the op changed the replica.
    fn wrote(&self, result: &OpResult) -> bool {
        match (self, result) {
            (_, OpResult::Error(_)) => false,
            (ClientOp::Assign { .. } | ClientOp::Delete { .. }, r) => *r == OpResult::Int(1),
            (ClientOp::SetRemove { .. }, r) => *r == OpResult::Int(1),
            (ClientOp::CounterAdd { .. } | ClientOp::SetAdd { .. }, OpResult::Int(_)) => true,
            (ClientOp::PutMax { .. } | ClientOp::PutSet { .. }, OpResult::Done) => true,
            _ => false,
        }
    }
}

impl std::fmt::Display for ClientOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = |k: &Bytes| String::from_utf8_lossy(k).into_owned();
        match self {
            ClientOp::Assign {
                key,
                value,
                condition,
            } => write!(
                f,
                "ASSIGN {} {} {condition:?}",
                k(key),
                String::from_utf8_lossy(value)
            ),
            ClientOp::Delete { key } => write!(f, "DEL {}", k(key)),
            ClientOp::CounterAdd { key, delta } => write!(f, "INCR {} {delta}", k(key)),
            ClientOp::SetAdd { key, member } => write!(f, "SADD {} {}", k(key), k(member)),
            ClientOp::SetRemove { key, member } => write!(f, "SREM {} {}", k(key), k(member)),
            ClientOp::PutMax { key, value } => write!(f, "MAX {} {value}", k(key)),
            ClientOp::PutSet { key, member } => write!(f, "GADD {} {}", k(key), k(member)),
        }
    }
}

/// What a write did, for the checks that look inside values.
#[derive(Clone, Debug)]
pub enum Effect {
    /// A counter change by `actor`.
    Counter { actor: u64, inc: u64, dec: u64 },
    /// An OR-set add of a member no other write adds.
    Add { member: Bytes },
    /// An OR-set remove.
    Remove { member: Bytes },
    /// Anything else (checked through the lattice order only).
    Other,
}

/// Why a write may be missing at the end.
#[derive(Clone, Debug)]
pub enum Loss {
    /// Every copy of it was on a node that crashed (allowed).
    Crash(String),
    /// Every copy of it was on a node that left gracefully and stopped (a bug if the
    /// write was acknowledged and is missing).
    Leave(String),
}

/// One write executed by a shard.
pub struct WriteRec {
    /// Index in the history.
    pub id: usize,
    /// The key.
    pub key: Bytes,
    /// Where it ran ("node/worker").
    pub at: String,
    /// When (ms since start).
    pub time: u64,
    /// The op.
    pub op: ClientOp,
    /// Its delta: the record it merged into the key (reconstructed from the states around
    /// it with the lattice crate's own delta constructors).
    pub delta: Record,
    /// What it did, for value-level checks.
    pub effect: Effect,
    /// The client got a success.
    pub acked: bool,
    /// Set when every copy of the write was lost (see [`Loss`]).
    pub lost: Option<Loss>,
    /// Where a copy was when a node last crashed or left without losing it.
    pub kept: Option<String>,
}

/// A message in flight.
#[derive(Clone)]
pub struct Envelope {
    /// Sender.
    pub from: Replica,
    /// Destination.
    pub to: Replica,
    /// The incarnation of the destination node when sent (a restarted node does not get
    /// its previous incarnation's messages: the connection died with it).
    pub to_inc: u64,
    /// The message.
    pub msg: Msg,
}

/// Messages between workers: of one node through the in-process mesh (reliable), of
/// different nodes over the network.
#[derive(Clone)]
pub enum Msg {
    /// `WorkerMsg::Gossip`: a gossip batch from a worker of the same node.
    Gossip(GossipBatch),
    /// `WorkerMsg::Replicate`: merge and confirm (synchronous fan-out, same node).
    ReplicateLocal { req: u64, batch: GossipBatch },
    /// `Request::Replicate`: merge and confirm (gossip, anti-entropy, fan-out).
    Replicate {
        req: u64,
        entries: Vec<pb::gossip::Entry>,
    },
    /// Confirmation of a replicate.
    Ack { req: u64 },
    /// `Request::AntiEntropy`: the sender's digest of the keys it shares with the receiver.
    Digest {
        req: u64,
        sender_node: String,
        sender_worker: u32,
        buckets: Vec<u64>,
    },
    /// The reply: differing buckets and the receiver's entries in them.
    Repair {
        req: u64,
        differing: Vec<u32>,
        entries: Vec<pb::gossip::Entry>,
    },
    /// `WorkerMsg::Exec` / `Request::Forward`: run a client op here.
    Forward { req: u64, op: ClientOp, ack: usize },
    /// The result of a forward (`write`: the simulator's id of the write it ran).
    Forwarded {
        req: u64,
        ok: bool,
        write: Option<usize>,
    },
}

impl Msg {
    /// The keys a message carries (for the trace while a key is watched).
    fn keys(&self) -> String {
        let names = |keys: &mut dyn Iterator<Item = &Bytes>| {
            keys.map(|k| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            Msg::Gossip(b) | Msg::ReplicateLocal { batch: b, .. } => {
                names(&mut b.iter().map(|(k, _)| k))
            }
            Msg::Replicate { entries, .. } | Msg::Repair { entries, .. } => {
                names(&mut entries.iter().map(|e| &e.key))
            }
            Msg::Forward { op, .. } => names(&mut std::iter::once(op.key())),
            _ => String::new(),
        }
    }

    /// Short name and number of entries, for the trace.
    fn describe(&self) -> (&'static str, usize) {
        match self {
            Msg::Gossip(b) => ("gossip", b.len()),
            Msg::ReplicateLocal { batch, .. } => ("replicate-local", batch.len()),
            Msg::Replicate { entries, .. } => ("replicate", entries.len()),
            Msg::Ack { .. } => ("ack", 0),
            Msg::Digest { .. } => ("digest", 0),
            Msg::Repair { entries, .. } => ("repair", entries.len()),
            Msg::Forward { ack, .. } if *ack > 1 => ("forward-acked", 1),
            Msg::Forward { .. } => ("forward", 1),
            Msg::Forwarded { .. } => ("forwarded", 0),
        }
    }
}

/// What a request's sender does with its reply or timeout.
enum Wait {
    /// A gossip batch to another node (`send_remote`): delivered or requeued.
    Gossip(Outgoing),
    /// An anti-entropy digest sent to `peer`.
    Digest { peer: Replica },
    /// The initiator's entries sent back after a repair.
    AntiEntropyReplicate,
    /// One step of a synchronous fan-out.
    Sync(Box<SyncState>),
    /// A forwarded client op.
    Forward,
}

/// A request waiting for its reply.
struct Pending {
    owner: Replica,
    inc: u64,
    wait: Wait,
}

/// A synchronous fan-out under way (`sync_replicas`).
struct SyncState {
    batch: GossipBatch,
    targets: VecDeque<(Replica, bool)>,
    acked: usize,
    ack: usize,
    write: Option<usize>,
    reply: SyncReply,
}

/// Who learns the outcome of a fan-out.
enum SyncReply {
    /// The client, directly.
    Client,
    /// The worker that forwarded the op.
    Forwarder { to: Replica, req: u64 },
}

/// Replies that complete a [`Pending`].
enum Reply {
    Ack,
    Repair {
        differing: Vec<u32>,
        entries: Vec<pb::gossip::Entry>,
    },
    Forwarded {
        ok: bool,
        write: Option<usize>,
    },
}

/// Scheduled events.
pub enum Event {
    /// A message arrives.
    Deliver(Envelope),
    /// A request times out.
    Timeout(u64),
    /// A worker's gossip timer.
    GossipTick(Replica, u64),
    /// A worker gossips now (changeset full, or a view change).
    GossipNow(Replica, u64),
    /// A worker's anti-entropy timer.
    AntiEntropyTick(Replica, u64),
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
pub struct Scheduled {
    at: u64,
    seq: u64,
    /// The event.
    pub ev: Event,
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

/// The simulated cluster.
pub struct World {
    /// The run's parameters.
    pub p: Params,
    rng: Rng,
    /// Simulated ms since the start.
    pub now: u64,
    seq: u64,
    /// Events to come.
    pub queue: BinaryHeap<Scheduled>,
    /// Messages in flight.
    in_flight: usize,
    events: u64,
    /// Every node ever started, by key.
    pub nodes: BTreeMap<NodeKey, NodeSim>,
    worker_counts: BTreeMap<String, usize>,
    next_fresh: usize,
    /// Membership with perfect information.
    pub truth: Truth,
    partition: Option<Partition>,
    next_partition: u64,
    pending: BTreeMap<u64, Pending>,
    next_req: u64,
    next_inc: u64,
    next_value: u64,
    /// Every write executed.
    pub writes: Vec<WriteRec>,
    /// Members added per key (removes pick one).
    added: BTreeMap<Bytes, Vec<Bytes>>,
    /// The trace.
    pub trace: Trace,
    healing: bool,
    draining: bool,
    /// Counts.
    pub report: Report,
    /// A key whose whereabouts are traced (`LATTICEKV_SIM_WATCH`), and where it was last.
    watch: Option<(Bytes, String)>,
}

/// The name of user key `i`.
pub fn key_name(i: usize) -> Bytes {
    Bytes::from(format!("k{i}"))
}

/// True if `holder` already includes `delta` in the lattice order (`delta ⊑ holder`).
pub fn covers(holder: &Record, delta: &Record) -> bool {
    let mut merged = holder.clone();
    merged.merge(delta.clone());
    merged == *holder
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
            in_flight: 0,
            events: 0,
            nodes: BTreeMap::new(),
            worker_counts: BTreeMap::new(),
            next_fresh: 0,
            truth: Truth::default(),
            partition: None,
            next_partition: 0,
            pending: BTreeMap::new(),
            next_req: 0,
            next_inc: 0,
            next_value: 0,
            writes: Vec::new(),
            added: BTreeMap::new(),
            trace: Trace {
                echo,
                ..Trace::default()
            },
            healing: false,
            draining: false,
            report: Report::default(),
            watch: std::env::var("LATTICEKV_SIM_WATCH")
                .ok()
                .map(|k| (Bytes::from(k), String::new())),
        }
    }

    /// Traces every change in where the watched key is stored (debugging aid).
    fn watch_key(&mut self) {
        let Some((key, last)) = &self.watch else {
            return;
        };
        let mut at = Vec::new();
        for node in self.nodes.values().filter(|n| n.status != Status::Down) {
            for (w, sh) in node.shards.iter().enumerate() {
                if let Some(r) = sh.shard.store().get(key) {
                    let r = r.to_record();
                    at.push(format!("{}/{w}:{:?}", node.id, r));
                }
                if sh.retry.iter().any(|(k, _)| k == key) {
                    at.push(format!("{}/{w}:retry", node.id));
                }
            }
        }
        let now = at.join(" ");
        if now != *last {
            let key = String::from_utf8_lossy(key).into_owned();
            self.trace
                .notable(self.now, format!("watch {key}: [{now}]"));
            if let Some(w) = self.watch.as_mut() {
                w.1 = now;
            }
        }
    }

    /// Runs the whole simulation: the active phase, healing, quiescence, the checks.
    pub fn run(&mut self) -> Result<Report, String> {
        NOW.set(EPOCH_MS);
        let initial: Vec<String> = (0..self.p.initial_nodes).map(|i| format!("n{i}")).collect();
        self.next_fresh = initial.len();
        let keys: Vec<NodeKey> = initial.iter().map(|id| self.add_node(id)).collect();
        let all: BTreeSet<NodeKey> = keys.iter().copied().collect();
        for &nk in &keys {
            self.truth.members.insert(nk);
            self.start_node(nk, all.clone(), true);
        }
        self.trace.notable(
            0,
            format!(
                "cluster of {} (workers {:?})",
                initial.join(" "),
                keys.iter()
                    .map(|k| self.nodes[k].shards.len())
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
        self.report.events = self.events;
        self.report.fingerprint = self.fingerprint();
        Ok(self.report.clone())
    }

    /// Hash of every live worker's records (in key order) and of the history.
    fn fingerprint(&self) -> u64 {
        use prost::Message;
        let mut bytes = Vec::new();
        for node in self.nodes.values().filter(|n| n.status != Status::Down) {
            for sh in &node.shards {
                let mut entries: Vec<(Vec<u8>, Record)> = sh
                    .shard
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
            bytes.extend_from_slice(format!("{}{}{}", w.at, w.time, w.op).as_bytes());
        }
        bytes.extend_from_slice(&self.events.to_le_bytes());
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }

    // ---- scheduling -----------------------------------------------------------------------

    fn schedule(&mut self, delay: u64, ev: Event) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at: self.now + delay,
            seq: self.seq,
            ev,
        });
    }

    /// Handles every event up to time `t` (ms since start).
    fn run_until(&mut self, t: u64) -> Result<(), String> {
        while self.queue.peek().is_some_and(|s| s.at <= t) {
            let Some(s) = self.queue.pop() else { break };
            self.now = s.at;
            NOW.set(EPOCH_MS + self.now);
            self.events += 1;
            if self.events > MAX_EVENTS {
                return Err(format!("more than {MAX_EVENTS} events: an event storm"));
            }
            self.handle(s.ev)?;
            if self.watch.is_some() {
                self.watch_key();
            }
        }
        self.now = self.now.max(t);
        NOW.set(EPOCH_MS + self.now);
        Ok(())
    }

    fn handle(&mut self, ev: Event) -> Result<(), String> {
        match ev {
            Event::Deliver(env) => self.deliver(env)?,
            Event::Timeout(req) => self.on_timeout(req),
            Event::GossipTick(r, inc) => {
                if self.shard(r, inc).is_some() {
                    self.gossip_round(r);
                    self.schedule(self.p.gossip_ms, Event::GossipTick(r, inc));
                }
            }
            Event::GossipNow(r, inc) => {
                if self.shard(r, inc).is_some() {
                    self.gossip_round(r);
                }
            }
            Event::AntiEntropyTick(r, inc) => {
                if self.shard(r, inc).is_some() {
                    self.anti_entropy_round(r);
                    self.schedule(self.p.anti_entropy_ms, Event::AntiEntropyTick(r, inc));
                }
            }
            Event::AdoptView(r, inc) => self.adopt_view(r, inc),
            Event::AgentTick(nk, inc) => {
                if self.nodes[&nk].inc == inc && self.nodes[&nk].status != Status::Down {
                    self.refresh_belief(nk);
                    self.schedule(self.p.agent_ms, Event::AgentTick(nk, inc));
                }
            }
            Event::LeavePoll(nk, inc) => self.leave_poll(nk, inc)?,
            Event::Detect(nk, inc) => {
                let node = &self.nodes[&nk];
                if node.inc == inc && node.status == Status::Down {
                    self.truth.members.remove(&nk);
                    let id = node.id.clone();
                    self.trace
                        .notable(self.now, format!("{id} is declared dead"));
                }
            }
            Event::Rejoin(id) => {
                let down = self.nodes[&node_key(&id)].status == Status::Down;
                if !down {
                    // A join took the id in the meantime.
                    return Ok(());
                }
                let nk = self.add_node(&id);
                self.truth.members.insert(nk);
                self.start_node(nk, BTreeSet::from([nk]), false);
                self.trace
                    .notable(self.now, format!("{id} restarts with an empty store"));
            }
            Event::PartitionEnd(id) => {
                if self.partition.as_ref().is_some_and(|p| p.id == id) {
                    self.partition = None;
                    self.trace.notable(self.now, "partition heals".into());
                }
            }
            Event::ClientWrite => {
                if !self.healing {
                    self.client_write()?;
                    let next = self.rng.u64(1..=2 * self.p.write_every_ms);
                    self.schedule(next, Event::ClientWrite);
                }
            }
            Event::Fault(kind) => {
                if !self.healing {
                    self.fault(kind)?;
                }
            }
        }
        Ok(())
    }

    // ---- nodes and shards -----------------------------------------------------------------

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
            vnodes: 16,
        };
        self.next_inc += 1;
        let skew = self.rng.i64(-self.p.max_skew_ms..=self.p.max_skew_ms);
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
                skew,
                synced: false,
                belief: BTreeSet::from([nk]),
                table_version: 0,
                view,
                view_version: 0,
                shards: Vec::new(),
                leave_deadline: 0,
            },
        );
        nk
    }

    fn default_vector(&self) -> ReplicationVector {
        default_vector(self.p.global_rf, self.p.local_rf)
    }

    /// Builds the view of `members` with the current replication table.
    fn build_view(&self, members: &BTreeSet<NodeKey>, version: u64) -> ViewState {
        let infos = members.iter().map(|m| self.nodes[m].info.clone()).collect();
        let table: ReplicationTable = self
            .truth
            .table
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let mut view = ViewState::of(infos, table, self.default_vector());
        view.version = version;
        view
    }

    /// Starts a node's workers with the view of `belief` (the whole cluster for the initial
    /// nodes; itself alone for a node that joins, as a starting agent knows only itself).
    fn start_node(&mut self, nk: NodeKey, belief: BTreeSet<NodeKey>, initial: bool) {
        let view = if initial {
            Arc::new(self.build_view(&belief, 0))
        } else {
            let info = self.nodes[&nk].info.clone();
            Arc::new(ViewState::of(
                vec![info],
                ReplicationTable::new(),
                self.default_vector(),
            ))
        };
        let workers = self.nodes[&nk].info.workers.len();
        let mut shards = Vec::with_capacity(workers);
        for w in 0..workers {
            self.next_inc += 1;
            let actor = self.rng.u64(..);
            let config = ShardConfig {
                me: Replica {
                    node: nk,
                    worker: w as u32,
                },
                limits: Limits::default(),
                memory_budget: 1 << 30,
                max_changeset_keys: self.p.max_changeset_keys,
                settle_ms: 1_000,
                clock_skew_ms: 0,
            };
            shards.push(ShardSim {
                shard: Shard::with_clock(config, view.clone(), actor, sim_clock),
                inc: self.next_inc,
                remote_batches: 0,
                ae_busy: false,
                retry: Vec::new(),
            });
        }
        let table_version = if initial { self.truth.table_version } else { 0 };
        let node = self.nodes.get_mut(&nk).expect("node entry");
        node.status = Status::Up;
        node.synced = initial;
        node.belief = belief;
        node.table_version = table_version;
        node.view = view;
        node.view_version = 0;
        node.shards = shards;
        let inc = node.inc;
        let incs: Vec<u64> = node.shards.iter().map(|s| s.inc).collect();
        let agent = self.rng.u64(1..=self.p.agent_ms);
        self.schedule(agent, Event::AgentTick(nk, inc));
        for (w, sinc) in incs.into_iter().enumerate() {
            let r = Replica {
                node: nk,
                worker: w as u32,
            };
            let g = self.rng.u64(1..=self.p.gossip_ms);
            self.schedule(g, Event::GossipTick(r, sinc));
            let a = self.rng.u64(0..=self.p.anti_entropy_ms);
            self.schedule(a, Event::AntiEntropyTick(r, sinc));
        }
    }

    fn live(&self, nk: NodeKey) -> bool {
        self.nodes
            .get(&nk)
            .is_some_and(|n| n.status != Status::Down)
    }

    /// The worker `r` if it is the incarnation `inc` and its node is live. Sets the clock
    /// skew to its node's, so the shard reads its own clock.
    fn shard(&mut self, r: Replica, inc: u64) -> Option<&mut ShardSim> {
        let node = self.nodes.get_mut(&r.node)?;
        if node.status == Status::Down {
            return None;
        }
        SKEW.set(node.skew);
        node.shards
            .get_mut(r.worker as usize)
            .filter(|s| s.inc == inc)
    }

    /// The current incarnation of worker `r`, if its node is live.
    fn shard_now(&mut self, r: Replica) -> Option<&mut ShardSim> {
        let node = self.nodes.get_mut(&r.node)?;
        if node.status == Status::Down {
            return None;
        }
        SKEW.set(node.skew);
        node.shards.get_mut(r.worker as usize)
    }

    /// Worker `r` if it is the incarnation `inc` and its node is live (read-only).
    fn shard_ref(&self, r: Replica, inc: u64) -> Option<&ShardSim> {
        let node = self.nodes.get(&r.node)?;
        if node.status == Status::Down {
            return None;
        }
        node.shards.get(r.worker as usize).filter(|s| s.inc == inc)
    }

    /// Every copy of `keys` the cluster would still deliver (see `check`): in live workers'
    /// stores and retry queues, in batches to other nodes that live workers will retry
    /// until acknowledged, and in messages between workers of a live node. An ack already
    /// on its way counts as received: its batch will not be retried, and a worker handing
    /// the batch's keys off will drop them (the recipient's copy counts if it is up).
    #[allow(clippy::type_complexity)]
    pub fn copies_of(&self, keys: &BTreeSet<Bytes>) -> BTreeMap<Bytes, Vec<(String, Record)>> {
        let mut out: BTreeMap<Bytes, Vec<(String, Record)>> = BTreeMap::new();
        let mut add = |k: &Bytes, r: &Record, at: &dyn Fn() -> String| {
            if keys.contains(k) {
                out.entry(k.clone()).or_default().push((at(), r.clone()));
            }
        };
        let acked: BTreeSet<u64> = self
            .queue
            .iter()
            .filter_map(|s| match &s.ev {
                Event::Deliver(Envelope {
                    msg: Msg::Ack { req },
                    ..
                }) => Some(*req),
                _ => None,
            })
            .collect();
        let mut doomed: BTreeSet<(Replica, &Bytes)> = BTreeSet::new();
        for (req, p) in &self.pending {
            if let (Wait::Gossip(batch), true) = (&p.wait, acked.contains(req)) {
                doomed.extend(batch.entries.iter().map(|(k, _)| (p.owner, k)));
            }
        }
        for (&nk, node) in self.nodes.iter().filter(|(_, n)| n.status != Status::Down) {
            for (w, sh) in node.shards.iter().enumerate() {
                let me = Replica {
                    node: nk,
                    worker: w as u32,
                };
                for k in keys {
                    if doomed.contains(&(me, k)) && !sh.shard.is_replica(k) {
                        continue;
                    }
                    if let Some(r) = sh.shard.store().get(k) {
                        add(k, &r.to_record(), &|| {
                            format!("the store of {}/{w}", node.id)
                        });
                    }
                }
                for (k, r) in &sh.retry {
                    add(k, r, &|| format!("the requeued gossip of {}/{w}", node.id));
                }
            }
        }
        for (req, p) in &self.pending {
            if let Wait::Gossip(batch) = &p.wait {
                if self.shard_ref(p.owner, p.inc).is_some() && !acked.contains(req) {
                    for (k, r) in &batch.entries {
                        add(k, r, &|| {
                            format!(
                                "a batch from {} to {} awaiting its ack",
                                self.name(p.owner),
                                self.name(batch.to)
                            )
                        });
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
            if let Msg::Gossip(batch) | Msg::ReplicateLocal { batch, .. } = &env.msg {
                for (k, r) in batch {
                    add(k, r, &|| {
                        format!(
                            "a message from {} to {}",
                            self.name(env.from),
                            self.name(env.to)
                        )
                    });
                }
            }
        }
        out
    }

    fn inc_of(&mut self, r: Replica) -> u64 {
        self.shard_now(r).map_or(0, |s| s.inc)
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

    /// Sends a message: to a worker of the same node through the mesh (reliable), to
    /// another node over the network (loss, duplication, delay, partitions).
    fn send(&mut self, from: Replica, to: Replica, msg: Msg) {
        let Some(dest) = self.nodes.get(&to.node) else {
            return;
        };
        let to_inc = dest.inc;
        let dest_down = dest.status == Status::Down;
        let (kind, n) = msg.describe();
        let keys = if self.watch.is_some() {
            msg.keys()
        } else {
            String::new()
        };
        let env = Envelope {
            from,
            to,
            to_inc,
            msg,
        };
        if from.node == to.node {
            self.in_flight += 1;
            let delay = self.rng.u64(0..=1);
            self.schedule(delay, Event::Deliver(env));
            return;
        }
        self.report.messages += 1;
        let fate = if dest_down {
            Some("refused")
        } else if !self.reachable(from.node, to.node) {
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
                .event(self.now, || format!("{kind}({n}) {f} -> {t} {fate} {keys}"));
            return;
        }
        let copies = if !self.healing && self.rng.f64() < self.p.dup {
            self.report.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            self.in_flight += 1;
            let delay = self.rng.u64(1..=self.p.max_delay_ms);
            self.schedule(delay, Event::Deliver(env.clone()));
        }
    }

    fn new_req(&mut self, owner: Replica, wait: Wait) -> u64 {
        self.next_req += 1;
        let inc = self.inc_of(owner);
        self.pending
            .insert(self.next_req, Pending { owner, inc, wait });
        self.schedule(self.p.timeout_ms, Event::Timeout(self.next_req));
        self.next_req
    }

    fn deliver(&mut self, env: Envelope) -> Result<(), String> {
        self.in_flight -= 1;
        let Some(dest) = self.nodes.get(&env.to.node) else {
            return Ok(());
        };
        if dest.status == Status::Down
            || dest.inc != env.to_inc
            || env.to.worker as usize >= dest.shards.len()
            || !self.reachable(env.from.node, env.to.node)
        {
            return Ok(());
        }
        let (from, to) = (env.from, env.to);
        {
            let (kind, n) = env.msg.describe();
            let keys = if self.watch.is_some() {
                env.msg.keys()
            } else {
                String::new()
            };
            let (f, t) = (self.name(from), self.name(to));
            self.trace.event(self.now, || {
                format!("{kind}({n}) {f} -> {t} delivered {keys}")
            });
        }
        match env.msg {
            // inbox_loop: WorkerMsg::Gossip.
            Msg::Gossip(batch) => {
                if let Some(sh) = self.shard_now(to) {
                    sh.shard.merge_gossip(batch);
                }
            }
            // inbox_loop: WorkerMsg::Replicate.
            Msg::ReplicateLocal { req, batch } => {
                if let Some(sh) = self.shard_now(to) {
                    sh.shard.merge_gossip(batch);
                    self.send(to, from, Msg::Ack { req });
                }
            }
            // native.rs: ReqOp::Replicate.
            Msg::Replicate { req, entries } => {
                if let Some(sh) = self.shard_now(to) {
                    sh.shard.merge_gossip(decode_entries(entries));
                    self.send(to, from, Msg::Ack { req });
                }
            }
            Msg::Ack { req } => self.on_reply(req, Reply::Ack)?,
            // native.rs: ReqOp::AntiEntropy.
            Msg::Digest {
                req,
                sender_node,
                sender_worker,
                buckets,
            } => {
                if let Some(sh) = self.shard_now(to) {
                    let peer = Replica {
                        node: node_key(&sender_node),
                        worker: sender_worker,
                    };
                    let differing = sh.shard.differing(peer, &buckets);
                    let mut entries = sh.shard.bucket_entries(peer, &differing);
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                    let entries = encode_entries(&entries);
                    self.send(
                        to,
                        from,
                        Msg::Repair {
                            req,
                            differing,
                            entries,
                        },
                    );
                }
            }
            Msg::Repair {
                req,
                differing,
                entries,
            } => self.on_reply(req, Reply::Repair { differing, entries })?,
            // inbox_loop: WorkerMsg::Exec, native.rs: ReqOp::Forward.
            Msg::Forward { req, op, ack } => {
                let reply = SyncReply::Forwarder { to: from, req };
                if ack > 1 {
                    self.run_acked_here(to, &op, ack, reply)?;
                } else {
                    // The mesh's Exec checks whether the changeset is full; native Forward
                    // does not.
                    let notify = from.node == to.node;
                    let (ok, write) = self.execute(to, &op, true, notify)?;
                    self.finish(to, reply, ok, write);
                }
            }
            Msg::Forwarded { req, ok, write } => {
                self.on_reply(req, Reply::Forwarded { ok, write })?
            }
        }
        Ok(())
    }

    fn on_reply(&mut self, req: u64, reply: Reply) -> Result<(), String> {
        let Some(p) = self.pending.remove(&req) else {
            // A duplicate, or a reply after the timeout: the caller has moved on.
            return Ok(());
        };
        let owner = p.owner;
        if self.shard(owner, p.inc).is_none() {
            return Ok(());
        }
        match (p.wait, reply) {
            (Wait::Gossip(out), Reply::Ack) => {
                let sh = self.shard_now(owner).expect("owner checked");
                sh.remote_batches -= 1;
                sh.shard.delivered(out.entries.iter().map(|(k, _)| &k[..]));
            }
            (Wait::Digest { peer }, Reply::Repair { differing, entries }) => {
                self.anti_entropy_repair(owner, peer, differing, entries);
            }
            (Wait::AntiEntropyReplicate, Reply::Ack) => {
                self.shard_now(owner).expect("owner checked").ae_busy = false;
            }
            (Wait::Sync(mut s), Reply::Ack) => {
                s.acked += 1;
                self.sync_next(owner, s);
            }
            (Wait::Forward, Reply::Forwarded { ok, write }) => {
                if let (true, Some(w)) = (ok, write) {
                    self.writes[w].acked = true;
                }
            }
            _ => return Err(format!("simulator bug: mismatched reply to request {req}")),
        }
        Ok(())
    }

    fn on_timeout(&mut self, req: u64) {
        let Some(p) = self.pending.remove(&req) else {
            return;
        };
        let owner = p.owner;
        if self.shard(owner, p.inc).is_none() {
            return;
        }
        let to = self.name(owner);
        self.trace
            .event(self.now, || format!("request {req} of {to} timed out"));
        match p.wait {
            Wait::Gossip(out) => {
                self.shard_now(owner).expect("owner checked").remote_batches -= 1;
                self.gossip_failed(owner, out);
            }
            Wait::Digest { .. } | Wait::AntiEntropyReplicate => {
                self.shard_now(owner).expect("owner checked").ae_busy = false;
            }
            Wait::Sync(s) => self.sync_next(owner, s),
            Wait::Forward => {}
        }
    }

    // ---- gossip (worker.rs: gossip_round, send_remote) ------------------------------------

    fn gossip_round(&mut self, r: Replica) {
        let Some(sh) = self.shard_now(r) else { return };
        let mut outgoing = sh.shard.take_gossip();
        sh.retry.clear();
        outgoing.sort_by_key(|o| o.to);
        for out in &mut outgoing {
            out.entries.sort_by(|a, b| a.0.cmp(&b.0));
        }
        for out in outgoing {
            if out.to.node == r.node {
                let full = self.rng.f64() < self.p.inbox_full;
                let sh = self.shard_now(r).expect("checked above");
                if full {
                    // try_send failed: requeue.
                    sh.retry.extend(out.entries.iter().cloned());
                    sh.shard.requeue(out);
                } else {
                    let keys: Vec<Bytes> = out.entries.iter().map(|(k, _)| k.clone()).collect();
                    sh.shard.delivered(keys.iter().map(|k| &k[..]));
                    self.send(r, out.to, Msg::Gossip(out.entries));
                }
            } else {
                let sh = self.shard_now(r).expect("checked above");
                if sh.remote_batches >= MAX_REMOTE_BATCHES {
                    sh.retry.extend(out.entries.iter().cloned());
                    sh.shard.requeue(out);
                    continue;
                }
                if sh.shard.view().addr(out.to).is_none() {
                    // The destination left the view: the changeset re-sends to the current
                    // replicas.
                    self.gossip_failed(r, out);
                    continue;
                }
                sh.remote_batches += 1;
                let entries = encode_entries(&out.entries);
                let to = out.to;
                let req = self.new_req(r, Wait::Gossip(out));
                self.send(r, to, Msg::Replicate { req, entries });
            }
        }
        if let Some(sh) = self.shard_now(r) {
            sh.shard.after_gossip(TOMBSTONE_GRACE_MS);
        }
    }

    /// A batch to another node failed: requeued (or, in the broken modes, dropped or
    /// counted as delivered).
    fn gossip_failed(&mut self, r: Replica, out: Outgoing) {
        let mode = self.p.mode;
        let Some(sh) = self.shard_now(r) else { return };
        match mode {
            Mode::Correct => {
                sh.retry.extend(out.entries.iter().cloned());
                sh.shard.requeue(out);
            }
            Mode::NoRetryNoAntiEntropy => {}
            Mode::AckOnTimeout => sh.shard.delivered(out.entries.iter().map(|(k, _)| &k[..])),
        }
    }

    // ---- anti-entropy (worker.rs: anti_entropy_round) -------------------------------------

    fn anti_entropy_round(&mut self, r: Replica) {
        if self.p.mode == Mode::NoRetryNoAntiEntropy || self.draining {
            return;
        }
        let Some(sh) = self.shard_now(r) else { return };
        if sh.ae_busy {
            return;
        }
        let view = sh.shard.view().clone();
        let mut candidates: Vec<Replica> = view
            .view
            .nodes()
            .flat_map(|(&node, info)| {
                (0..info.workers.len() as u32).map(move |worker| Replica { node, worker })
            })
            .filter(|c| *c != r)
            .collect();
        candidates.sort();
        if candidates.is_empty() {
            return;
        }
        let peer = candidates[self.rng.usize(..candidates.len())];
        if view.addr(peer).is_none() {
            return;
        }
        let sh = self.shard_now(r).expect("checked above");
        let buckets = sh.shard.digest(peer);
        let Some(info) = view.view.node(r.node) else {
            // Not in its own view (leaving): no anti-entropy.
            return;
        };
        sh.ae_busy = true;
        let sender_node = info.id.clone();
        let req = self.new_req(r, Wait::Digest { peer });
        self.send(
            r,
            peer,
            Msg::Digest {
                req,
                sender_node,
                sender_worker: r.worker,
                buckets,
            },
        );
    }

    fn anti_entropy_repair(
        &mut self,
        r: Replica,
        peer: Replica,
        differing: Vec<u32>,
        entries: Vec<pb::gossip::Entry>,
    ) {
        if !differing.is_empty() {
            self.report.repairs += 1;
        }
        let sh = self.shard_now(r).expect("owner checked");
        if differing.is_empty() {
            sh.ae_busy = false;
            return;
        }
        sh.shard.merge_gossip(decode_entries(entries));
        let mut mine = sh.shard.bucket_entries(peer, &differing);
        mine.sort_by(|a, b| a.0.cmp(&b.0));
        if mine.is_empty() {
            sh.ae_busy = false;
            return;
        }
        let entries = encode_entries(&mine);
        let req = self.new_req(r, Wait::AntiEntropyReplicate);
        self.send(r, peer, Msg::Replicate { req, entries });
    }

    // ---- views (worker.rs: view_loop; cluster/agent.rs) -----------------------------------

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
            // A starting agent knows only itself until it reaches a seed (if there is
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
        if members == node.belief && self.truth.table_version == node.table_version {
            if !node.synced {
                self.nodes.get_mut(&nk).expect("node").synced = true;
            }
            return;
        }
        self.publish(nk, members);
    }

    fn publish(&mut self, nk: NodeKey, members: BTreeSet<NodeKey>) {
        let version = self.nodes[&nk].view_version + 1;
        let view = Arc::new(self.build_view(&members, version));
        let names: Vec<&str> = members.iter().map(|m| self.nodes[m].id.as_str()).collect();
        let what = format!(
            "{} publishes view {version}: [{}] with {} explicit vectors",
            self.nodes[&nk].id,
            names.join(" "),
            self.truth.table.len()
        );
        self.trace.notable(self.now, what);
        self.report.views += 1;
        let table_version = self.truth.table_version;
        let node = self.nodes.get_mut(&nk).expect("node");
        node.synced = true;
        node.view = view;
        node.view_version = version;
        node.belief = members;
        node.table_version = table_version;
        let incs: Vec<u64> = node.shards.iter().map(|s| s.inc).collect();
        for (w, inc) in incs.into_iter().enumerate() {
            let delay = self.rng.u64(0..=3);
            let r = Replica {
                node: nk,
                worker: w as u32,
            };
            self.schedule(delay, Event::AdoptView(r, inc));
        }
    }

    fn adopt_view(&mut self, r: Replica, inc: u64) {
        let latest = match self.nodes.get(&r.node) {
            Some(n) => n.view.clone(),
            None => return,
        };
        let Some(sh) = self.shard(r, inc) else { return };
        if sh.shard.view().version == latest.version {
            return;
        }
        sh.shard.set_view(latest);
        // Hand-offs go out now rather than at the next tick.
        self.schedule(0, Event::GossipNow(r, inc));
    }

    // ---- clients, forwarding, fan-out (worker.rs: dispatch, dispatch_acked, run_acked_here,
    // sync_replicas; native.rs: Forward) ----------------------------------------------------

    fn client_write(&mut self) -> Result<(), String> {
        let ups: Vec<NodeKey> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.status == Status::Up)
            .map(|(k, _)| *k)
            .collect();
        if ups.is_empty() {
            return Ok(());
        }
        // The client learned the cluster from some node (its view may be stale).
        let view = self.nodes[&ups[self.rng.usize(..ups.len())]].view.clone();
        let k = self.rng.usize(..self.p.keys);
        let op = self.make_op(k);
        let ack = if self.rng.f64() < self.p.sync_fraction {
            2
        } else {
            1
        };
        if self.rng.f64() < self.p.front_fraction {
            // The front port of a node of its view; the node hands it to some worker, which
            // forwards what it does not hold.
            let mut nodes: Vec<NodeKey> = view.view.nodes().map(|(k, _)| *k).collect();
            nodes.sort();
            let nk = nodes[self.rng.usize(..nodes.len())];
            if !self.live(nk) {
                return Ok(());
            }
            let workers = self.nodes[&nk].shards.len();
            let w = Replica {
                node: nk,
                worker: self.rng.usize(..workers) as u32,
            };
            self.dispatch(w, op, ack, false)?;
        } else {
            // A replica's own port; redirects are followed a few times.
            let replicas = view.replicas(op.key());
            if replicas.is_empty() {
                return Ok(());
            }
            let mut target = replicas[self.rng.usize(..replicas.len())];
            for _ in 0..3 {
                let live = self.nodes.get(&target.node).is_some_and(|n| {
                    n.status != Status::Down && n.shards.len() > target.worker as usize
                });
                if !live {
                    return Ok(());
                }
                match self.dispatch(target, op.clone(), ack, true)? {
                    Some(redirect) if !redirect.is_empty() => {
                        target = redirect[self.rng.usize(..redirect.len())];
                    }
                    _ => return Ok(()),
                }
            }
        }
        Ok(())
    }

    fn make_op(&mut self, k: usize) -> ClientOp {
        let key = key_name(k);
        self.next_value += 1;
        let n = self.next_value;
        if self.rng.f64() < 0.08 {
            return ClientOp::Delete { key };
        }
        match k % 5 {
            0 => {
                let condition = match self.rng.u32(0..10) {
                    0 => Condition::IfAbsent,
                    1 => Condition::IfPresent,
                    _ => Condition::Always,
                };
                ClientOp::Assign {
                    key,
                    value: Bytes::from(format!("v{n}")),
                    condition,
                }
            }
            1 => {
                let mut delta = self.rng.i64(-3..=5);
                if delta == 0 {
                    delta = 1;
                }
                ClientOp::CounterAdd { key, delta }
            }
            2 => {
                let added = self.added.get(&key).map_or(0, Vec::len);
                if added > 0 && self.rng.f64() < 0.35 {
                    let member = self.added[&key][self.rng.usize(..added)].clone();
                    ClientOp::SetRemove { key, member }
                } else {
                    let member = Bytes::from(format!("m{n}"));
                    self.added
                        .entry(key.clone())
                        .or_default()
                        .push(member.clone());
                    ClientOp::SetAdd { key, member }
                }
            }
            3 => ClientOp::PutMax {
                key,
                value: self.rng.i64(0..1_000),
            },
            _ => ClientOp::PutSet {
                key,
                member: Bytes::from(format!("g{n}")),
            },
        }
    }

    /// A client op arriving at worker `w` (`dispatch` / `dispatch_acked`). Returns the
    /// redirect if `redirect` and `w` does not hold the key.
    fn dispatch(
        &mut self,
        w: Replica,
        op: ClientOp,
        ack: usize,
        redirect: bool,
    ) -> Result<Option<Vec<Replica>>, String> {
        let Some(sh) = self.shard_now(w) else {
            return Ok(None);
        };
        let key = op.key().clone();
        let local = sh.shard.route(&key) == Route::Local;
        let replicas = sh.shard.replicas(&key);
        let view = sh.shard.view().clone();
        if local {
            if ack > 1 {
                self.run_acked_here(w, &op, ack, SyncReply::Client)?;
            } else {
                let (ok, write) = self.execute(w, &op, false, true)?;
                if let (true, Some(id)) = (ok, write) {
                    self.writes[id].acked = true;
                }
            }
            return Ok(None);
        }
        if redirect {
            return Ok(Some(replicas));
        }
        // Shard::route picks a random replica with the global generator: pick with ours.
        let r = replicas[self.rng.usize(..replicas.len())];
        if r.node == w.node {
            let req = self.new_req(w, Wait::Forward);
            self.send(w, r, Msg::Forward { req, op, ack });
        } else if ack > 1 {
            // forward_acked to the chosen replica.
            if view.addr(r).is_some() {
                let req = self.new_req(w, Wait::Forward);
                self.send(w, r, Msg::Forward { req, op, ack });
            }
        } else {
            // forward_any: the chosen replica, then the key's replicas on other nodes; a
            // write moves on only when a replica cannot be reached at all.
            let mut candidates = vec![r];
            candidates.extend(
                replicas
                    .iter()
                    .copied()
                    .filter(|c| c.node != w.node && *c != r),
            );
            for c in candidates {
                if view.addr(c).is_none() || !self.live(c.node) || !self.reachable(w.node, c.node) {
                    continue;
                }
                let req = self.new_req(w, Wait::Forward);
                self.send(w, c, Msg::Forward { req, op, ack });
                break;
            }
        }
        Ok(None)
    }

    /// Runs a client op on worker `at` and records the write it made. `forwarded`: the op
    /// came from another worker, or with acknowledgements (`Shard::execute_forwarded`);
    /// `notify`: gossip early if the changeset is full.
    fn execute(
        &mut self,
        at: Replica,
        op: &ClientOp,
        forwarded: bool,
        notify: bool,
    ) -> Result<(bool, Option<usize>), String> {
        let name = self.name(at);
        let now = self.now;
        let Some(sh) = self.shard_now(at) else {
            return Ok((false, None));
        };
        let inc = sh.inc;
        let actor = sh.shard.actor();
        let key = op.key().clone();
        let pre = sh.shard.store().get(&key).map(|r| r.to_record());
        let replica = sh.shard.is_replica(&key);
        let result = if forwarded {
            // Sent here under a view that may have changed since: a write to a key this
            // worker does not replicate is passed on to the current owners.
            sh.shard.execute_forwarded(op.to_op())
        } else {
            sh.shard.execute(op.to_op())
        };
        let ok = !matches!(result, OpResult::Error(_));
        let wrote = op.wrote(&result);
        let post = sh.shard.store().get(&key).map(|r| r.to_record());
        let full = notify && sh.shard.changeset_full();
        if full {
            self.schedule(0, Event::GossipNow(at, inc));
        }
        if let OpResult::Error(e) = &result {
            return Err(format!("{op} at {name} failed: {e:?}"));
        }
        let write = if wrote {
            let post = post.ok_or_else(|| format!("{op} at {name} left no record"))?;
            let (delta, effect) = derive(op, pre.as_ref(), &post, actor)
                .map_err(|e| format!("{op} at {name}: {e}"))?;
            let id = self.writes.len();
            self.trace.event(now, || {
                format!(
                    "write #{id} {op} at {name}{} epoch {:?}",
                    if replica { "" } else { " (not a replica)" },
                    delta.epoch
                )
            });
            self.report.writes += 1;
            self.report.misplaced_writes += u64::from(!replica);
            self.writes.push(WriteRec {
                id,
                key,
                at: name,
                time: now,
                op: op.clone(),
                delta,
                effect,
                acked: false,
                lost: None,
                kept: None,
            });
            Some(id)
        } else {
            None
        };
        Ok((ok, write))
    }

    /// `run_acked_here`: runs the op, then waits until `ack` replicas hold the key.
    fn run_acked_here(
        &mut self,
        at: Replica,
        op: &ClientOp,
        ack: usize,
        reply: SyncReply,
    ) -> Result<(), String> {
        let (ok, write) = self.execute(at, op, true, false)?;
        if !ok {
            self.finish(at, reply, false, write);
            return Ok(());
        }
        let key = op.key().clone();
        let Some(sh) = self.shard_now(at) else {
            return Ok(());
        };
        let Some(record) = sh.shard.store().get(&key).map(|r| r.to_record()) else {
            self.finish(at, reply, true, write);
            return Ok(());
        };
        let view = sh.shard.view().clone();
        let targets: VecDeque<(Replica, bool)> = sh
            .shard
            .replicas(&key)
            .into_iter()
            .filter(|r| *r != at)
            .map(|r| (r, view.addr(r).is_some()))
            .collect();
        if targets.len() + 1 < ack {
            self.finish(at, reply, false, write);
            return Ok(());
        }
        let state = SyncState {
            batch: vec![(key, record)],
            targets,
            acked: 1,
            ack,
            write,
            reply,
        };
        self.sync_next(at, Box::new(state));
        Ok(())
    }

    fn sync_next(&mut self, owner: Replica, mut s: Box<SyncState>) {
        loop {
            if s.acked >= s.ack {
                let (reply, write) = (s.reply, s.write);
                self.finish(owner, reply, true, write);
                return;
            }
            let Some((target, has_addr)) = s.targets.pop_front() else {
                let (reply, write) = (s.reply, s.write);
                self.finish(owner, reply, false, write);
                return;
            };
            if target.node == owner.node {
                let batch = s.batch.clone();
                let req = self.new_req(owner, Wait::Sync(s));
                self.send(owner, target, Msg::ReplicateLocal { req, batch });
                return;
            }
            if has_addr {
                let entries = encode_entries(&s.batch);
                let req = self.new_req(owner, Wait::Sync(s));
                self.send(owner, target, Msg::Replicate { req, entries });
                return;
            }
        }
    }

    /// The outcome of a write reaches its client, or the worker that forwarded it.
    fn finish(&mut self, at: Replica, reply: SyncReply, ok: bool, write: Option<usize>) {
        match reply {
            SyncReply::Client => {
                if let (true, Some(id)) = (ok, write) {
                    self.writes[id].acked = true;
                }
            }
            SyncReply::Forwarder { to, req } => {
                self.send(at, to, Msg::Forwarded { req, ok, write });
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
                self.start_node(nk, BTreeSet::from([nk]), false);
                self.report.joins += 1;
                let workers = self.nodes[&nk].shards.len();
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
                self.next_partition += 1;
                let id = self.next_partition;
                let names: Vec<&str> = side.iter().map(|k| self.nodes[k].id.as_str()).collect();
                let duration = self.rng.u64(100..=self.p.max_partition_ms);
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

    /// A node crashes: its state is gone. Writes whose every copy was there are lost.
    fn crash(&mut self, nk: NodeKey, restart: bool) {
        let node = self.nodes.get_mut(&nk).expect("node");
        let was_member = self.truth.members.contains(&nk);
        node.status = Status::Down;
        node.shards.clear();
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

    /// `server::leave`: a leaving node stops once every worker has handed everything off.
    fn leave_poll(&mut self, nk: NodeKey, inc: u64) -> Result<(), String> {
        let node = &self.nodes[&nk];
        if node.inc != inc || node.status != Status::Leaving {
            return Ok(());
        }
        let stats: Vec<WorkerStats> = node
            .shards
            .iter()
            .enumerate()
            .map(|(w, s)| WorkerStats {
                worker: w as u32,
                shard: s.shard.stats(),
                connections: 0,
                batches_in_flight: s.remote_batches as u64,
                subscriptions: 0,
            })
            .collect();
        if stats.iter().all(WorkerStats::handed_everything_off) {
            let id = node.id.clone();
            let node = self.nodes.get_mut(&nk).expect("node");
            node.status = Status::Down;
            node.shards.clear();
            self.report.leaves += 1;
            self.trace
                .notable(self.now, format!("{id} has handed off its keys and stops"));
            super::check::mark_lost(self, Loss::Leave(format!("{id} left at {}ms", self.now)));
            return Ok(());
        }
        if self.now >= node.leave_deadline {
            let mut keys: Vec<String> = Vec::new();
            for (w, sh) in node.shards.iter().enumerate() {
                for (k, r) in sh.shard.store().iter() {
                    if r.is_live() {
                        keys.push(format!(
                            "{} on worker {w} (gossip pending: {})",
                            String::from_utf8_lossy(k),
                            sh.shard.has_gossip()
                        ));
                    }
                }
            }
            keys.sort();
            return Err(format!(
                "{} has not handed everything off {LEAVE_DEADLINE_MS}ms after leaving \
                 ({stats:?}); live keys: {}",
                node.id,
                keys.join(", ")
            ));
        }
        self.schedule(LEAVE_POLL_MS, Event::LeavePoll(nk, inc));
        Ok(())
    }

    // ---- quiescence -----------------------------------------------------------------------

    /// After the active phase: runs gossip and anti-entropy until nothing is left to do and
    /// anti-entropy would find nothing to repair.
    fn quiesce(&mut self) -> Result<(), String> {
        let start = self.now;
        loop {
            // Repair with anti-entropy running…
            self.run_until(self.now + 2 * self.p.anti_entropy_ms)?;
            // …then let what is under way finish, starting no new exchange.
            self.draining = true;
            let until = self.now + 3_000;
            while self.now < until && self.busy().is_some() {
                self.run_until(self.now + 10)?;
            }
            if self.busy().is_none() && self.diverged().is_none() {
                self.draining = false;
                self.report.quiesce_ms = self.now - start;
                self.trace.notable(self.now, "quiescent".into());
                return Ok(());
            }
            self.draining = false;
            if self.now > start + QUIESCE_LIMIT_MS {
                let why = match self.busy() {
                    Some(busy) => busy,
                    None => self.diverged().unwrap_or_default(),
                };
                return Err(format!(
                    "not quiescent {QUIESCE_LIMIT_MS}ms after the active phase: {why}"
                ));
            }
        }
    }

    /// What is still going on, if anything: leaves, membership or views not settled,
    /// messages in flight, requests pending, changesets not empty.
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
            for (w, sh) in node.shards.iter().enumerate() {
                if sh.shard.view().version != node.view_version {
                    return Some(format!("{}/{w} has not switched views", node.id));
                }
                if sh.shard.has_gossip() {
                    return Some(format!("{}/{w} has gossip to send", node.id));
                }
            }
        }
        if self.in_flight > 0 {
            return Some(format!("{} messages in flight", self.in_flight));
        }
        if !self.pending.is_empty() {
            return Some(format!("{} requests pending", self.pending.len()));
        }
        None
    }

    /// A reason anti-entropy would still repair something, if any: two workers sharing
    /// keys whose digests differ. (Anti-entropy off: never.)
    fn diverged(&mut self) -> Option<String> {
        if self.p.mode == Mode::NoRetryNoAntiEntropy {
            return None;
        }
        // Cheap first: replicas of the same key holding different records.
        if let Err(e) = super::check::replicas_agree(self) {
            return Some(e);
        }
        let workers: Vec<Replica> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.status == Status::Up)
            .flat_map(|(&node, n)| {
                (0..n.shards.len() as u32).map(move |worker| Replica { node, worker })
            })
            .collect();
        for (i, &a) in workers.iter().enumerate() {
            for &b in &workers[i + 1..] {
                let da = self.shard_now(a).expect("up").shard.digest(b);
                let db = self.shard_now(b).expect("up").shard.digest(a);
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
}

/// Reconstructs a write's delta from the key's record before and after it, with the
/// lattice crate's own delta constructors, and checks the state after includes it.
fn derive(
    op: &ClientOp,
    pre: Option<&Record>,
    post: &Record,
    actor: u64,
) -> Result<(Record, Effect), String> {
    let epoch = post.epoch;
    let same_epoch_set = || match pre {
        Some(Record {
            epoch: e,
            value: Some(Value::OrSet(s)),
        }) if *e == epoch => Some((**s).clone()),
        _ => None,
    };
    let (delta, effect) = match op {
        ClientOp::Assign { value, .. } => match &post.value {
            Some(Value::Lww(l)) if l.value[..] == value[..] => (post.clone(), Effect::Other),
            other => return Err(format!("an assignment left {other:?}")),
        },
        ClientOp::Delete { .. } => {
            if post.value.is_some() {
                return Err("a delete left a value".into());
            }
            (post.clone(), Effect::Other)
        }
        ClientOp::CounterAdd { delta, .. } => match &post.value {
            Some(Value::Counter(c)) => {
                let mine = Counter::from_entries([(actor, c.get(actor))]);
                let effect = Effect::Counter {
                    actor,
                    inc: (*delta).max(0) as u64,
                    dec: (-*delta).max(0) as u64,
                };
                (Record::new(epoch, Some(Value::Counter(mine))), effect)
            }
            other => return Err(format!("an increment left {other:?}")),
        },
        ClientOp::SetAdd { member, .. } => {
            let base = same_epoch_set().unwrap_or_else(OrSet::new);
            let d = base.add_delta(actor, Box::from(&member[..]));
            (
                Record::new(epoch, Some(Value::OrSet(Box::new(d)))),
                Effect::Add {
                    member: member.clone(),
                },
            )
        }
        ClientOp::SetRemove { member, .. } => {
            let base = same_epoch_set().ok_or_else(|| "a remove from no set".to_string())?;
            let d = base.remove_delta(&member[..]);
            (
                Record::new(epoch, Some(Value::OrSet(Box::new(d)))),
                Effect::Remove {
                    member: member.clone(),
                },
            )
        }
        ClientOp::PutMax { value, .. } => (
            Record::new(epoch, Some(Value::Max(Max(*value)))),
            Effect::Other,
        ),
        ClientOp::PutSet { member, .. } => {
            let set: Set<Box<[u8]>> = [Box::from(&member[..])].into_iter().collect();
            (Record::new(epoch, Some(Value::Set(set))), Effect::Other)
        }
    };
    if !covers(post, &delta) {
        return Err(format!(
            "the reconstructed delta {delta:?} is not in the state after, {post:?}"
        ));
    }
    Ok((delta, effect))
}
