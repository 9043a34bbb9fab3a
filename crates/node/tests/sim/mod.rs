//! A deterministic, seeded simulator of a latticekv cluster's replication.
//!
//! Every worker of every simulated node is a real replica core ([`node::core::Core`]) —
//! the same state machine the node's tokio driver runs — and the simulator plays only the
//! world around them: it delivers what the cores send (through the mesh within a node, over
//! a faulty network between nodes, encoded as the peer plane encodes it), ticks each core
//! when its deadline comes, publishes views as the cluster agents would, and plays the
//! clients. It makes no decision a worker makes: gossip, retries, hand-off, anti-entropy,
//! forwarding, acknowledgement levels and tombstone reclamation all happen in the cores.
//!
//! Everything is a function of the seed: one [`fastrand::Rng`] drives every choice of the
//! simulator and seeds every core (their replica choices and hash-map orders), time is
//! simulated (each node has a [`ManualClock`](node::clock::ManualClock), with a skew), and
//! events run in (time, sequence) order.
//!
//! # What is modelled
//! - **Workers**: real cores, ticked at their deadlines.
//! - **Network** between nodes: loss, duplication, uniform delays (so reordering),
//!   partitions in two groups, refused connections to nodes that are down; a restarted node
//!   does not get its previous incarnation's messages. Within a node the mesh is reliable,
//!   but a worker's inbox may be full (the send fails at once).
//! - **Agents**: the membership everyone would agree on, and each node's own belief,
//!   refreshed every agent period: a node learns joins, leaves, deaths (declared
//!   `detect_ms` after a crash) and replication vectors at its own pace, and declares dead
//!   the nodes a partition has hidden from it for `detect_ms` (split views), until the
//!   partition heals. Members declared dead stay in views as holders (they may come back).
//!   A starting node knows only itself until it reaches a member. Every worker switches to
//!   its node's new view a little after the agent publishes it.
//! - **Nodes**: joins (fresh ids, or ids of dead nodes), graceful leaves (stop once every
//!   worker has handed everything off), crashes, restarts with an empty store (possibly
//!   before the others noticed the crash).
//! - **Clients**: writes, and in some runs reads (which, while keys move, ask their previous
//!   owners); every request a live worker accepted must be answered.
//! - **Addresses**: a request to another node goes to the peer address the core names, as
//!   the real worker connects to it; none (a node missing from the sender's view), or
//!   another node's, fails the request on the spot as `Worker::send` does.
//!
//! # What is not
//! Disks (a crash loses a node's state; durable answers come at once), the time a
//! connection attempt takes, and asymmetric partitions.
//!
//! # Layout
//! - this module: [`Params`] (what a seed chooses), [`run`], [`Failure`], the trace;
//! - [`world`]: the cluster, the network and the event loop;
//! - [`client`]: the clients' ops and the record of every write;
//! - [`check`]: which writes may be lost, and the final checks.

pub mod check;
pub mod client;
pub mod world;

use std::collections::VecDeque;
use std::fmt;

use fastrand::Rng;

pub use world::World;

/// What the simulation deliberately breaks, to show the checks can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The node's protocol as written.
    Correct,
    /// Gossip batches that fail are dropped instead of requeued, and anti-entropy is off:
    /// replicas must end up diverged under loss.
    NoRetryNoAntiEntropy,
    /// A batch that times out counts as delivered (hand-offs drop keys that never arrived):
    /// acknowledged writes must end up lost.
    AckOnTimeout,
    /// The core itself broken: a handed-off key is dropped after the first new replica
    /// acknowledged it instead of all of them.
    DropAfterFirstAck,
}

/// Everything a seed decides about a run.
#[derive(Clone, Debug)]
pub struct Params {
    /// The seed.
    pub seed: u64,
    /// What is broken on purpose.
    pub mode: Mode,
    /// Nodes at the start.
    pub initial_nodes: usize,
    /// Most nodes up at once.
    pub max_nodes: usize,
    /// Default replication: nodes per key.
    pub global_rf: u32,
    /// Default replication: workers per node per key.
    pub local_rf: u32,
    /// Number of distinct user keys.
    pub keys: usize,
    /// Probability that a message between nodes is lost.
    pub loss: f64,
    /// Probability that a message between nodes is delivered twice.
    pub dup: f64,
    /// Largest network delay between nodes, in ms (delays are uniform in 1..=this).
    pub max_delay_ms: u64,
    /// Probability that a worker's inbox is full when another worker of its node gossips
    /// to it (the batch is requeued).
    pub inbox_full: f64,
    /// Gossip period of every worker, in ms.
    pub gossip_ms: u64,
    /// Anti-entropy period of every worker, in ms.
    pub anti_entropy_ms: u64,
    /// Timeout of a request to another node, in ms (`PEER_TIMEOUT`).
    pub timeout_ms: u64,
    /// Period of the cluster agents (membership gossip), in ms.
    pub agent_ms: u64,
    /// When a leaving node first looks whether it may stop, in ms after the leave (`None`:
    /// three agent periods; then every `LEAVE_POLL_MS`).
    pub leave_first_poll_ms: Option<u64>,
    /// Time until a dead or unreachable node is declared dead, in ms.
    pub detect_ms: u64,
    /// Length of the active phase (writes and faults), in ms.
    pub active_ms: u64,
    /// Mean time between client writes, in ms.
    pub write_every_ms: u64,
    /// Fraction of writes that ask for two acknowledgements (synchronous fan-out).
    pub sync_fraction: f64,
    /// Fraction of writes sent to the shared front port (forwarded) rather than to a
    /// replica's own port (redirected).
    pub front_fraction: f64,
    /// Changeset size that makes a worker gossip before its timer.
    pub max_changeset_keys: usize,
    /// Largest clock skew of a node, in ms (each node gets one in ±this).
    pub max_skew_ms: i64,
    /// Age of a tombstone before its reclamation starts, in ms.
    pub tombstone_grace_ms: u64,
    /// Faults of the active phase, in order: (time offset in ms, fault).
    pub faults: Vec<(u64, FaultKind)>,
    /// Shortest partition, in ms.
    pub min_partition_ms: u64,
    /// Longest partition, in ms.
    pub max_partition_ms: u64,
    /// Fraction of client writes that are deletes.
    pub delete_fraction: f64,
    /// Clients write until this time (ms since the start).
    pub writes_until_ms: u64,
    /// Client reads, if any.
    pub reads: Option<Reads>,
    /// No read of a key that was written may answer that it is absent (sound only without
    /// deletes and without crashes, which may lose a key's every copy).
    pub check_reads: bool,
}

/// When clients read.
#[derive(Clone, Copy, Debug)]
pub struct Reads {
    /// From this time (ms since the start).
    pub from_ms: u64,
    /// Until this time.
    pub until_ms: u64,
    /// Mean time between reads, in ms.
    pub every_ms: u64,
}

/// A fault the simulation injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// A node joins (a new id, or the id of a node that is down).
    Join,
    /// A node leaves gracefully: out of the rings, hands off its keys, then stops.
    Leave,
    /// A node crashes: its state is lost; the others declare it dead after `detect_ms`.
    Fail,
    /// A node crashes and comes back with an empty store, possibly before anyone noticed.
    Restart,
    /// The nodes split in two groups that cannot reach each other for a while.
    Partition,
    /// A key gets an explicit replication vector.
    SetVector,
}

impl Params {
    /// The parameters seed `seed` chooses.
    pub fn from_seed(seed: u64, mode: Mode) -> Params {
        let mut rng = Rng::with_seed(seed ^ 0x5EED_0F1A_771C_E5A5);
        let initial_nodes = rng.usize(3..=5);
        let active_ms = rng.u64(2_500..=5_000);
        let kinds = [
            FaultKind::Join,
            FaultKind::Leave,
            FaultKind::Fail,
            FaultKind::Restart,
            FaultKind::Partition,
            FaultKind::Partition,
            FaultKind::SetVector,
        ];
        let mut faults: Vec<(u64, FaultKind)> = (0..rng.usize(2..=6))
            .map(|_| (rng.u64(100..active_ms), kinds[rng.usize(..kinds.len())]))
            .collect();
        faults.sort_by_key(|f| f.0);
        let heavy = mode != Mode::Correct;
        Params {
            seed,
            mode,
            initial_nodes,
            max_nodes: 6,
            global_rf: rng.u32(2..=3),
            local_rf: if rng.bool() { 1 } else { 2 },
            keys: rng.usize(8..=24),
            loss: if heavy {
                0.4
            } else {
                [0.0, 0.05, 0.15, 0.3][rng.usize(..4)]
            },
            dup: [0.0, 0.02, 0.1][rng.usize(..3)],
            max_delay_ms: rng.u64(2..=40),
            inbox_full: [0.0, 0.02][rng.usize(..2)],
            gossip_ms: rng.u64(20..=80),
            anti_entropy_ms: rng.u64(200..=800),
            timeout_ms: rng.u64(120..=300),
            agent_ms: 100,
            leave_first_poll_ms: None,
            detect_ms: rng.u64(300..=700),
            active_ms,
            write_every_ms: rng.u64(8..=25),
            sync_fraction: [0.0, 0.1, 0.3][rng.usize(..3)],
            front_fraction: rng.f64(),
            max_changeset_keys: rng.usize(2..=16),
            max_skew_ms: rng.i64(0..=200),
            tombstone_grace_ms: rng.u64(300..=1_500),
            faults,
            min_partition_ms: 100,
            max_partition_ms: rng.u64(200..=1_500),
            delete_fraction: 0.08,
            writes_until_ms: u64::MAX,
            reads: None,
            check_reads: false,
        }
    }

    /// A graceful leave under reads, where only the leaving node holds what the new owners
    /// read: one replica per key, no loss, no other fault. Clients write (no deletes) for
    /// the first second, then read every ~1 ms from a little before the leave until after
    /// it — through front ports and replicas' own ports — and no read of a key that was
    /// written may answer that it is absent, wherever the key is in the hand-off: a new
    /// owner that misses asks the leaving node, which is no longer in its view.
    pub fn leave_under_reads(seed: u64) -> Params {
        let mut p = Params::from_seed(seed, Mode::Correct);
        p.global_rf = 1;
        p.local_rf = 1;
        p.keys = 48;
        p.loss = 0.0;
        p.dup = 0.0;
        p.inbox_full = 0.0;
        p.sync_fraction = 0.0;
        // No request times out: a read may take a forward and a fetch, each a round trip.
        p.timeout_ms = 1_000;
        // The others hear of the leave soon, as a leaving agent tells them at once (new
        // owners switch views while the keys are on their way), or a while later (the
        // leaving node hands keys to nodes that still route them to it).
        p.agent_ms = if seed.is_multiple_of(2) { 10 } else { 100 };
        // Hand-offs take a while to arrive.
        p.max_delay_ms = 30 + seed % 4 * 20;
        p.active_ms = 2_500;
        p.write_every_ms = 3;
        p.writes_until_ms = 1_000;
        p.delete_fraction = 0.0;
        p.faults = vec![(1_500, FaultKind::Leave)];
        p.reads = Some(Reads {
            from_ms: 1_400,
            until_ms: 2_000,
            every_ms: 1,
        });
        p.check_reads = true;
        p
    }

    /// A graceful leave under reads that go through front ports only, while the others
    /// hear of the leave late (up to 300 ms after it) and the leaving node looks whether it
    /// may stop every 50 ms from the start, as a real one does: other nodes forward reads
    /// to the leaving node after it has handed their keys off, and it answers them by
    /// asking the new owners, a round trip during which its last hand-off may complete.
    pub fn leave_under_forwarded_reads(seed: u64) -> Params {
        let mut p = Params::leave_under_reads(seed);
        p.front_fraction = 1.0;
        p.agent_ms = 300;
        p.leave_first_poll_ms = Some(10);
        p.max_delay_ms = 20 + seed % 4 * 20;
        p
    }

    /// A long partition with the node's real timings: three nodes that each replicate
    /// every key, one or two of them cut off for two simulated hours starting a second in,
    /// writes and deletes on both sides every ~10 s, tombstones eligible for reclamation
    /// after the default 60 s. A delete made on one side while the other is cut off must
    /// not come back when the partition heals, whatever each side reclaimed meanwhile.
    pub fn long_partition(seed: u64) -> Params {
        const HOURS_2: u64 = 2 * 60 * 60 * 1000;
        let mut p = Params::from_seed(seed, Mode::Correct);
        p.initial_nodes = 3;
        p.global_rf = 3;
        p.local_rf = 1;
        p.keys = 6;
        p.loss = 0.0;
        p.dup = 0.0;
        p.gossip_ms = 100;
        p.anti_entropy_ms = 30_000;
        p.timeout_ms = 5_000;
        p.agent_ms = 1_000;
        p.detect_ms = 10_000;
        p.active_ms = HOURS_2 + 10 * 60 * 1000;
        p.write_every_ms = 10_000;
        p.tombstone_grace_ms = 60_000;
        p.faults = vec![(1_000, FaultKind::Partition)];
        p.min_partition_ms = HOURS_2;
        p.max_partition_ms = HOURS_2;
        p
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} ({:?}): {} nodes, rf {}x{}, {} keys, loss {}, dup {}, delay ≤{}ms, \
             gossip {}ms, anti-entropy {}ms, timeout {}ms, detect {}ms, active {}ms, \
             write every ~{}ms, sync {}, front {:.2}, changeset ≤{}, skew ±{}ms, \
             tombstone grace {}ms, partitions ≤{}ms, faults {:?}, deletes {}, writes until {}ms, \
             reads {:?}",
            self.seed,
            self.mode,
            self.initial_nodes,
            self.global_rf,
            self.local_rf,
            self.keys,
            self.loss,
            self.dup,
            self.max_delay_ms,
            self.gossip_ms,
            self.anti_entropy_ms,
            self.timeout_ms,
            self.detect_ms,
            self.active_ms,
            self.write_every_ms,
            self.sync_fraction,
            self.front_fraction,
            self.max_changeset_keys,
            self.max_skew_ms,
            self.tombstone_grace_ms,
            self.max_partition_ms,
            self.faults,
            self.delete_fraction,
            self.writes_until_ms,
            self.reads,
        )
    }
}

/// What one run did, for the summary of many seeds.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Writes that changed a replica.
    pub writes: u64,
    /// Client ops answered with success.
    pub acked: u64,
    /// Client reads answered.
    pub reads: u64,
    /// Client reads answered with an error.
    pub read_errors: u64,
    /// Client reads answered with a timeout (a worker on their way never answered).
    pub read_timeouts: u64,
    /// Requests a leaving node still had in progress when it stopped (its drain's bound
    /// passed): their senders wait until their timeout.
    pub stopped_with_open_requests: u64,
    /// Requests to other nodes that could not be sent: no peer address for the node (or
    /// not its own) in what the core gave.
    pub unaddressed: u64,
    /// Tombstones reclaimed (by each replica).
    pub reclaimed: u64,
    /// Writes superseded by a reclaimed delete.
    pub retired: u64,
    /// Writes that ran while a tombstone of their key was being reclaimed.
    pub racing: u64,
    /// Writes whose every copy was lost with crashed nodes (allowed to be missing).
    pub excused: u64,
    /// Writes whose last copies were on a node when it stopped after leaving (allowed only
    /// if not acknowledged: a write whose forwarder's answer was lost).
    pub lost_on_leave: u64,
    /// Writes that had to survive and were checked.
    pub checked: u64,
    /// Messages between nodes sent, lost (loss or partition), duplicated.
    pub messages: u64,
    /// Messages lost.
    pub lost: u64,
    /// Messages duplicated.
    pub duplicated: u64,
    /// Faults applied: joins, leaves, failures, restarts, partitions, vector changes.
    pub joins: u64,
    /// Graceful leaves that completed.
    pub leaves: u64,
    /// Crashes (including restarts).
    pub failures: u64,
    /// Restarts.
    pub restarts: u64,
    /// Partitions.
    pub partitions: u64,
    /// Explicit replication vectors set.
    pub vectors: u64,
    /// Views published by agents.
    pub views: u64,
    /// Views that changed the hash-tag rule of the node publishing them.
    pub rule_changes: u64,
    /// Anti-entropy exchanges that found differing buckets.
    pub repairs: u64,
    /// Simulated ms from the end of the active phase until quiescence.
    pub quiesce_ms: u64,
    /// Writes executed by a worker that did not replicate the key (forwarded under a
    /// view that had changed).
    pub misplaced_writes: u64,
    /// Events handled.
    pub events: u64,
    /// Hash of the final state of every worker and of the run's history (same seed, same
    /// fingerprint).
    pub fingerprint: u64,
}

impl Report {
    /// Adds another run's counts.
    pub fn add(&mut self, o: &Report) {
        self.writes += o.writes;
        self.acked += o.acked;
        self.reads += o.reads;
        self.read_errors += o.read_errors;
        self.stopped_with_open_requests += o.stopped_with_open_requests;
        self.read_timeouts += o.read_timeouts;
        self.unaddressed += o.unaddressed;
        self.reclaimed += o.reclaimed;
        self.retired += o.retired;
        self.racing += o.racing;
        self.excused += o.excused;
        self.checked += o.checked;
        self.lost_on_leave += o.lost_on_leave;
        self.messages += o.messages;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.joins += o.joins;
        self.leaves += o.leaves;
        self.failures += o.failures;
        self.restarts += o.restarts;
        self.partitions += o.partitions;
        self.vectors += o.vectors;
        self.views += o.views;
        self.rule_changes += o.rule_changes;
        self.repairs += o.repairs;
        self.quiesce_ms = self.quiesce_ms.max(o.quiesce_ms);
        self.misplaced_writes += o.misplaced_writes;
        self.events += o.events;
        self.fingerprint ^= o.fingerprint;
    }
}

/// A failed run: what went wrong, with the parameters and the end of the trace.
#[derive(Debug)]
pub struct Failure {
    /// The parameters (and seed) of the run.
    pub params: Params,
    /// What went wrong.
    pub reason: String,
    /// The notable events of the run and the last events before the failure.
    pub trace: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "simulation failed: {}", self.reason)?;
        writeln!(f, "  {}", self.params)?;
        writeln!(
            f,
            "  replay: LATTICEKV_SIM_SEED={} cargo test -p latticekv-node --test simulation -- --nocapture \
             (LATTICEKV_SIM_TRACE=1 prints every event)",
            self.params.seed
        )?;
        write!(f, "{}", self.trace)
    }
}

/// Runs one simulation.
pub fn run(params: Params) -> Result<Report, Box<Failure>> {
    let mut world = World::new(params.clone());
    match world.run() {
        Ok(report) => Ok(report),
        Err(reason) => Err(Box::new(Failure {
            params,
            reason,
            trace: world.trace.render(),
        })),
    }
}

/// A trace of the run: every notable event (faults, views, leaves) and the last events of
/// any kind, kept cheaply and rendered only when a run fails.
#[derive(Default)]
pub struct Trace {
    /// Faults, views and other rare events, all of them.
    notable: Vec<(u64, String)>,
    /// The most recent events of every kind.
    recent: VecDeque<(u64, String)>,
    /// Print every event as it happens (`LATTICEKV_SIM_TRACE=1`).
    pub echo: bool,
}

/// How many recent events a trace keeps.
const RECENT: usize = 60;

impl Trace {
    /// Records a rare event.
    pub fn notable(&mut self, at: u64, what: String) {
        if self.echo {
            eprintln!("{at:>7} * {what}");
        }
        self.notable.push((at, what.clone()));
        self.push(at, what);
    }

    /// Records a frequent event (built only if it will be kept).
    pub fn event(&mut self, at: u64, what: impl FnOnce() -> String) {
        let what = what();
        if self.echo {
            eprintln!("{at:>7}   {what}");
        }
        self.push(at, what);
    }

    fn push(&mut self, at: u64, what: String) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back((at, what));
    }

    /// The trace as text.
    pub fn render(&self) -> String {
        let mut out = String::from("  notable events (ms since start):\n");
        for (at, what) in &self.notable {
            out.push_str(&format!("    {at:>7} {what}\n"));
        }
        out.push_str(&format!("  last {} events:\n", self.recent.len()));
        for (at, what) in &self.recent {
            out.push_str(&format!("    {at:>7} {what}\n"));
        }
        out
    }
}
