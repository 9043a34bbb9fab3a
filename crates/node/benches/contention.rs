//! The shape of the Anna paper's contention experiment (E1): update-only Zipf workloads,
//! shard-per-core workers exchanging gossip vs one shared map with striped locks, at the
//! same thread count.
//!
//! Workload: 1,000,000 keys of 8 bytes, each pre-loaded with a PN-counter; every update is a
//! counter increment (`Op::CounterAdd { delta: 1 }`) of a key drawn from a Zipf distribution
//! (θ = 4: high contention, θ = 0.5: low contention; an exact sampler over the 1,000,000
//! ranks). Each of the T threads applies the same number of updates, pre-generated (seeded)
//! before timing.
//!
//! - `contention/zipf<θ>/shard-per-core`: each thread owns a `Shard` (a ring of T workers,
//!   `default_local_replication = T`: every key on every worker, Anna's full replication).
//!   A thread executes its updates on its own shard without synchronisation; every 1,000
//!   updates it drains its changeset (`take_gossip`), sends each batch to its destination
//!   thread over a std `mpsc` channel, and merges the gossip it has received. At the end it
//!   sends its last gossip and a `Done` marker to every peer, and merges until it has every
//!   peer's `Done`: the timed section ends with all replicas converged.
//! - `contention/zipf<θ>/locked`: one map of 64 stripes, `Mutex<HashMap<key, Record>>`
//!   chosen by key hash (TBB's per-bucket locking, coarser); an update locks the stripe and
//!   merges a `Counter::add_delta` from the thread's own actor id into the key's record.
//!
//! Each sample is the wall time from the moment all threads are released until the last
//! one is done (`iter_custom`); thread start-up, channel set-up and pre-loading are outside.
//! State persists across runs (the counters keep growing). After each variant the bench
//! checks, outside timing, that nothing was lost: the shards agree on every key, and every
//! structure's counters add up to the pre-load plus every update applied.
//!
//! At the end it prints `locked / shard-per-core` (ratio of the median wall times of all the
//! runs the bench made, warm-up included) for each θ.
//!
//! Environment: `LKV_BENCH_KEYS` (default 1,000,000), `LKV_BENCH_THREADS` (default 2),
//! `LKV_BENCH_UPDATES` (updates per thread,
//! default 200,000).
//!
//! Then the `cost/…` benches (`contention/costs.rs`): the per-operation costs the scaling
//! model (`bench/scaling-model`) extrapolates from, one step per criterion iteration.
//!
//! Run: `cargo bench -p latticekv-node --bench contention`.

/// The same allocator as the `latticekv` binary, so the numbers match the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashSet;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use hashbrown::HashMap;
use lattice::{Counter, Lattice, Record, Value};
use node::clock::SystemClock;
use node::op::{Op, OpResult};
use node::shard::{GossipBatch, Shard, ShardConfig};
use node::view::{default_vector, ViewState};
use node::Limits;
use placement::key_hash;
use placement::ring::DEFAULT_VNODES;
use placement::{node_key, Replica};

#[path = "contention/costs.rs"]
mod costs;

/// Keys in the table (the paper's 1M); `LKV_BENCH_KEYS` overrides it (CI smoke runs).
fn keys() -> usize {
    env_usize("LKV_BENCH_KEYS", 1_000_000)
}
/// Stripes (locks) of the locked baseline.
const STRIPES: usize = 64;
/// Updates between two gossip exchanges of a shard-per-core thread.
const GOSSIP_EVERY: usize = 1_000;
/// Actor id of the locked baseline's pre-load.
const LOADER: u64 = 1;
/// Actor id of thread `i` (shard or locked) is `FIRST_ACTOR + i`.
const FIRST_ACTOR: u64 = 100;

/// An 8-byte key (as in the paper): `k` and the rank in 7 digits.
type Key = [u8; 8];

fn key(rank: usize) -> Key {
    format!("k{rank:07}")
        .as_bytes()
        .try_into()
        .expect("8-byte key")
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// An exact Zipf sampler over ranks `0..n`: P(rank k) ∝ 1 / (k + 1)^θ, by binary search in
/// the precomputed cumulative distribution.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, theta: f64) -> Self {
        let mut sum = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|k| {
                sum += (k as f64).powf(-theta);
                sum
            })
            .collect();
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf }
    }

    fn sample(&self, rng: &mut fastrand::Rng) -> usize {
        let u = rng.f64();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

/// The pre-generated updates of one θ.
struct Workload {
    theta: f64,
    /// Every key of the table, by rank.
    keys: Vec<Key>,
    /// Per thread: the keys it increments, in order.
    updates: Vec<Vec<Key>>,
}

impl Workload {
    fn new(theta: f64, threads: usize, per_thread: usize) -> Self {
        let zipf = Zipf::new(keys(), theta);
        let keys: Vec<Key> = (0..keys()).map(key).collect();
        let updates = (0..threads)
            .map(|t| {
                let seed = 0x5eed_0000 + (theta * 100.0) as u64 * 1_000 + t as u64;
                let mut rng = fastrand::Rng::with_seed(seed);
                (0..per_thread)
                    .map(|_| keys[zipf.sample(&mut rng)])
                    .collect()
            })
            .collect();
        Workload {
            theta,
            keys,
            updates,
        }
    }

    fn threads(&self) -> usize {
        self.updates.len()
    }

    fn total_updates(&self) -> u64 {
        self.updates.iter().map(|u| u.len() as u64).sum()
    }

    fn distinct_keys(&self) -> usize {
        self.updates.iter().flatten().collect::<HashSet<_>>().len()
    }

    fn name(&self) -> String {
        format!("zipf{}", self.theta)
    }
}

/// The median of `runs` (`None` if the variant did not run, e.g. filtered out).
fn median(runs: &[Duration]) -> Option<Duration> {
    let mut sorted = runs.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied()
}

// ---- shard-per-core -----------------------------------------------------------------------

/// What a shard-per-core thread receives from a peer.
enum Msg {
    Gossip(GossipBatch),
    /// The peer has sent all its gossip.
    Done,
}

/// T shards replicating every key, with the updates they applied.
struct ShardSystem {
    shards: Vec<Shard>,
    applied: u64,
    runs: Vec<Duration>,
    /// Per run, the CPU time of all its threads.
    cpu: Vec<Duration>,
}

impl ShardSystem {
    /// T shards, each loaded with every key (a counter at 1) by gossip.
    fn new(work: &Workload) -> Self {
        let threads = work.threads();
        let mut shards: Vec<Shard> = (0..threads)
            .map(|w| new_shard(threads, threads, w))
            .collect();
        let load = preload_batch(&work.keys);
        for shard in &mut shards {
            shard.merge_gossip(load.clone()).expect("merged in memory");
        }
        ShardSystem {
            shards,
            applied: 0,
            runs: Vec::new(),
            cpu: Vec::new(),
        }
    }

    /// Runs every thread's updates once; the wall time until all replicas converged.
    fn run(&mut self, work: &Workload) -> Duration {
        let threads = self.shards.len();
        let (senders, receivers): (Vec<Sender<Msg>>, Vec<Receiver<Msg>>) =
            (0..threads).map(|_| mpsc::channel()).unzip();
        let barrier = Barrier::new(threads + 1);
        let shards = std::mem::take(&mut self.shards);
        let (elapsed, shards) = thread::scope(|s| {
            let handles: Vec<_> = shards
                .into_iter()
                .zip(receivers)
                .zip(&work.updates)
                .enumerate()
                .map(|(me, ((shard, inbox), keys))| {
                    let peers = senders.clone();
                    let barrier = &barrier;
                    s.spawn(move || shard_thread(me, shard, keys, &peers, inbox, barrier))
                })
                .collect();
            barrier.wait();
            let start = Instant::now();
            let (shards, cpu): (Vec<Shard>, Vec<Duration>) = handles
                .into_iter()
                .map(|h| h.join().expect("shard thread panicked"))
                .unzip();
            self.cpu.push(cpu.into_iter().sum());
            (start.elapsed(), shards)
        });
        self.shards = shards;
        self.applied += work.total_updates();
        self.runs.push(elapsed);
        elapsed
    }

    /// Every replica holds the same counter for every key, and they add up to the pre-load
    /// plus every update applied.
    fn check(&mut self, work: &Workload) {
        let mut total: i128 = 0;
        for k in &work.keys {
            let mut values = self.shards.iter_mut().map(|s| counter_value(s, k));
            let first = values.next().expect("at least one shard");
            for v in values {
                assert_eq!(v, first, "replicas of {k:?} diverged");
            }
            total += first;
        }
        let expected = keys() as i128 + i128::from(self.applied);
        assert_eq!(total, expected, "shard-per-core lost updates");
    }
}

/// Worker `w` of a ring of `ring` workers on one node, each key on `replication` of them.
fn new_shard(ring: usize, replication: usize, w: usize) -> Shard {
    new_shard_seeded(ring, replication, w, FIRST_ACTOR + w as u64)
}

/// Every key as a counter at 1, as gossip records (from a loader shard of its own actor).
///
/// Loading a shard by gossip rather than by executing the writes on it keeps its
/// changeset small: the changeset keeps its capacity (`take_gossip`), and one that once
/// held every key makes each later gossip round scan a million empty buckets.
fn preload_batch(keys: &[Key]) -> GossipBatch {
    let mut loader = new_shard_seeded(2, 2, 1, LOADER);
    for k in keys {
        counter_add(&mut loader, k);
    }
    let mut batch = GossipBatch::new();
    while loader.has_gossip() {
        for out in loader.take_gossip() {
            batch.extend(out.entries);
        }
    }
    batch
}

/// `new_shard` with the shard's seed (its actor id) given.
fn new_shard_seeded(ring: usize, replication: usize, w: usize, seed: u64) -> Shard {
    let view = Arc::new(ViewState::single_node(
        "bench",
        ring,
        DEFAULT_VNODES,
        default_vector(1, replication as u32),
    ));
    let config = ShardConfig {
        me: Replica {
            node: node_key("bench"),
            worker: w as u32,
        },
        limits: Limits::default(),
        memory_budget: 64 << 30,
        max_changeset_keys: GOSSIP_EVERY,
        settle_ms: 0,
        tombstone_memory_ms: 0,
        disk_copy: Default::default(),
    };
    Shard::new(config, view, seed, Arc::new(SystemClock::default()))
}

fn counter_add(shard: &mut Shard, k: &Key) {
    match shard.execute(Op::CounterAdd {
        key: &k[..],
        delta: 1,
    }) {
        OpResult::Int(_) => {}
        other => panic!("counter add failed: {other:?}"),
    }
}

fn counter_value(shard: &mut Shard, k: &Key) -> i128 {
    match shard.execute(Op::Get { key: &k[..] }) {
        OpResult::Value(Some(Value::Counter(c))) => c.value(),
        other => panic!("not a counter: {other:?}"),
    }
}

/// Sends this shard's changeset to the peers, one batch per destination.
fn send_gossip(shard: &mut Shard, me: usize, peers: &[Sender<Msg>]) {
    for out in shard.take_gossip() {
        let w = out.to.worker as usize;
        if w != me && !out.entries.is_empty() {
            peers[w].send(Msg::Gossip(out.entries)).expect("peer alive");
        }
    }
}

/// Merges a message; 1 if it was a `Done` marker.
fn receive(shard: &mut Shard, msg: Msg) -> usize {
    match msg {
        Msg::Gossip(batch) => {
            shard.merge_gossip(batch).expect("merged in memory");
            0
        }
        Msg::Done => 1,
    }
}

fn shard_thread(
    me: usize,
    mut shard: Shard,
    keys: &[Key],
    peers: &[Sender<Msg>],
    inbox: Receiver<Msg>,
    barrier: &Barrier,
) -> (Shard, Duration) {
    let mut done = 0;
    barrier.wait();
    let cpu = thread_cpu();
    for chunk in keys.chunks(GOSSIP_EVERY) {
        for k in chunk {
            counter_add(&mut shard, k);
        }
        send_gossip(&mut shard, me, peers);
        while let Ok(msg) = inbox.try_recv() {
            done += receive(&mut shard, msg);
        }
    }
    // Flush: the last gossip went out with the last chunk; channels are FIFO, so a peer's
    // `Done` arrives after all of its gossip.
    for (w, peer) in peers.iter().enumerate() {
        if w != me {
            peer.send(Msg::Done).expect("peer alive");
        }
    }
    while done < peers.len() - 1 {
        let msg = inbox.recv().expect("peers send Done before hanging up");
        done += receive(&mut shard, msg);
    }
    (shard, thread_cpu().saturating_sub(cpu))
}

// ---- locked baseline ----------------------------------------------------------------------

type Stripe = Mutex<HashMap<Box<[u8]>, Record>>;

/// One shared map with striped locks.
struct Locked {
    stripes: Vec<Stripe>,
    applied: u64,
    runs: Vec<Duration>,
    /// Per run, the CPU time of all its threads.
    cpu: Vec<Duration>,
}

fn stripe_of<'a>(stripes: &'a [Stripe], k: &[u8]) -> &'a Stripe {
    &stripes[(key_hash(k) % stripes.len() as u64) as usize]
}

/// Merges the delta of one increment by `actor` into `record`.
fn increment(record: &mut Record, actor: u64) {
    let delta = match &record.value {
        Some(Value::Counter(c)) => c.add_delta(actor, 1),
        _ => Counter::new().add_delta(actor, 1),
    }
    .expect("no overflow");
    let epoch = record.epoch;
    record.merge(Record::new(epoch, Some(Value::Counter(delta))));
}

fn locked_update(stripes: &[Stripe], actor: u64, k: &[u8]) {
    let mut map = stripe_of(stripes, k).lock().expect("stripe poisoned");
    match map.get_mut(k) {
        Some(record) => increment(record, actor),
        None => {
            let mut record = Record::default();
            increment(&mut record, actor);
            map.insert(Box::from(k), record);
        }
    }
}

impl Locked {
    /// The map with every key loaded (a counter at 1, by `LOADER`).
    fn new(work: &Workload) -> Self {
        let stripes: Vec<Stripe> = (0..STRIPES).map(|_| Mutex::default()).collect();
        for k in &work.keys {
            locked_update(&stripes, LOADER, k);
        }
        Locked {
            stripes,
            applied: 0,
            runs: Vec::new(),
            cpu: Vec::new(),
        }
    }

    fn run(&mut self, work: &Workload) -> Duration {
        let barrier = Barrier::new(work.threads() + 1);
        let stripes = &self.stripes;
        let cpu = &mut self.cpu;
        let elapsed = thread::scope(|s| {
            let handles: Vec<_> = work
                .updates
                .iter()
                .enumerate()
                .map(|(me, keys)| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        let actor = FIRST_ACTOR + me as u64;
                        barrier.wait();
                        let cpu = thread_cpu();
                        for k in keys {
                            locked_update(stripes, actor, k);
                        }
                        thread_cpu().saturating_sub(cpu)
                    })
                })
                .collect();
            barrier.wait();
            let start = Instant::now();
            let used = handles
                .into_iter()
                .map(|h| h.join().expect("locked thread panicked"))
                .sum();
            cpu.push(used);
            start.elapsed()
        });
        self.applied += work.total_updates();
        self.runs.push(elapsed);
        elapsed
    }

    /// Every key is there and the counters add up to the pre-load plus every update.
    fn check(&self) {
        let mut stored = 0;
        let mut total: i128 = 0;
        for stripe in &self.stripes {
            let map = stripe.lock().expect("stripe poisoned");
            stored += map.len();
            for record in map.values() {
                match &record.value {
                    Some(Value::Counter(c)) => total += c.value(),
                    other => panic!("not a counter: {other:?}"),
                }
            }
        }
        assert_eq!(stored, keys());
        let expected = keys() as i128 + i128::from(self.applied);
        assert_eq!(total, expected, "locked baseline lost updates");
    }
}

// ---- driver -------------------------------------------------------------------------------

/// Median wall times, and CPU times of all threads, of one θ.
struct Outcome {
    theta: f64,
    shard: Option<Duration>,
    locked: Option<Duration>,
    shard_cpu: Option<Duration>,
    locked_cpu: Option<Duration>,
}

fn contention(c: &mut Criterion, theta: f64, threads: usize, per_thread: usize) -> Outcome {
    let work = Workload::new(theta, threads, per_thread);
    eprintln!(
        "contention zipf {theta}: {threads} threads x {per_thread} updates, {} distinct keys \
         updated of {}",
        work.distinct_keys(),
        keys()
    );
    let mut group = c.benchmark_group("contention");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(work.total_updates()));

    let mut shards = ShardSystem::new(&work);
    group.bench_function(format!("{}/shard-per-core", work.name()), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| shards.run(&work)).sum())
    });
    shards.check(&work);
    let (shard, shard_cpu) = (median(&shards.runs), median(&shards.cpu));
    drop(shards);

    let mut locked = Locked::new(&work);
    group.bench_function(format!("{}/locked", work.name()), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| locked.run(&work)).sum())
    });
    locked.check();
    group.finish();
    Outcome {
        theta,
        shard,
        locked: median(&locked.runs),
        shard_cpu,
        locked_cpu: median(&locked.cpu),
    }
}

fn main() {
    let threads = env_usize("LKV_BENCH_THREADS", 2);
    let per_thread = env_usize("LKV_BENCH_UPDATES", 200_000);
    let mut c = Criterion::default().configure_from_args();
    let outcomes: Vec<Outcome> = [4.0, 0.5]
        .into_iter()
        .map(|theta| contention(&mut c, theta, threads, per_thread))
        .collect();
    costs::costs(&mut c, threads, per_thread);
    c.final_summary();
    let total = (threads * per_thread) as f64;
    for o in outcomes {
        let (Some(shard), Some(locked)) = (o.shard, o.locked) else {
            continue;
        };
        let rate = |d: Duration| total / d.as_secs_f64().max(1e-9) / 1e6;
        let ratio = locked.as_secs_f64() / shard.as_secs_f64().max(1e-9);
        eprintln!(
            "contention zipf {}: shard-per-core {:.2?} ({:.2} M updates/s), locked {:.2?} \
             ({:.2} M updates/s), locked / shard-per-core = {ratio:.2}",
            o.theta,
            shard,
            rate(shard),
            locked,
            rate(locked),
        );
        // CPU per update (all threads' CPU time): what the design costs, whatever else
        // ran on the machine (the scaling model's validation uses it).
        if let (Some(sc), Some(lc)) = (o.shard_cpu, o.locked_cpu) {
            let per = |d: Duration| d.as_secs_f64() * 1e9 / total;
            eprintln!(
                "contention zipf {} cpu: shard-per-core {:.1} ns/update, locked {:.1} ns/update",
                o.theta,
                per(sc),
                per(lc)
            );
        }
    }
}

/// The CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the valid pointer we pass.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
