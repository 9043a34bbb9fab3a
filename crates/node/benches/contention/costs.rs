//! Per-operation costs for the scaling model (`bench/scaling-model`, docs/performance.md
//! "Scaling past this machine"): what one core pays for each step of the contention
//! experiment, measured single-threaded where possible so the machine's noise matters less.
//!
//! Each bench's unit (its criterion "iteration") is one step, so the median it reports is
//! nanoseconds per step. The single-threaded benches count the thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`, less the clock's own cost), not wall time: on this shared
//! 2-vCPU machine other jobs take the core away for whole time slices, and the model wants
//! what a step costs a core it has to itself. The T-thread benches are wall time (waiting
//! for the lock is their cost). Per θ ∈ {0.5, 1, 2, 4}, keys drawn as in the contention bench
//! (same table, same sampler), one thread:
//!
//! - `cost/zipf<θ>/shard-update-rep1`: `Shard::execute` of a counter increment on a shard
//!   that owns every key and replicates none (latticekv's default `local = 1`): no
//!   changeset. Unit: one update.
//! - `cost/zipf<θ>/shard-update-full`: the same on worker 0 of a ring of 2 workers with
//!   every key on both (full replication): each update also merges its delta into the
//!   changeset. Every 1,000 updates the changeset is taken and dropped, outside timing.
//!   Unit: one update. `…-full-r8`, `…-full-r64`: rings of 8 and 64 (θ = 0.5 and 4 only):
//!   the write path grows with the replica count.
//! - `cost/zipf<θ>/take-gossip`: `take_gossip` after each 1,000 updates (those untimed).
//!   Unit: one record for one destination. `…-r8`, `…-r64`: the rings of 8 and 64.
//! - `cost/zipf<θ>/merge-gossip`: `merge_gossip` of those batches into worker 1 (a full
//!   replica). Unit: one record merged.
//! - `cost/zipf<θ>/locked-update`: the contention bench's striped-lock update, one thread
//!   (never contended). Unit: one update.
//!
//! Independent of θ:
//!
//! - `cost/hot/locked-update`: one thread updating one key of the striped map (the
//!   uncontended cost of a hot-key update).
//! - `cost/hot/locked-handoff`: T threads (`LKV_BENCH_THREADS`) updating that one key.
//!   Unit: one update, wall time over all threads: the lock serialises them, so this minus
//!   `hot/locked-update` is what a contended hand-off adds per update.
//! - `cost/key-hash`: hashing an 8-byte key (the part of a locked update outside the lock).
//! - `cost/atomic/uncontended`, `cost/atomic/contended`: `fetch_add` on one cache line by
//!   one thread, and by T threads (wall time per add): the bare cache-line transfer.
//! - `cost/atomic/ping-pong`: two threads take turns writing one cache line, spinning;
//!   unit: one transfer of the line from one core to the other. Thread 0 times short batches of
//!   round trips and the bench keeps the fastest: a batch during which the other thread
//!   was descheduled (this VM's other jobs) can only be slower, and on a loaded machine
//!   few batches have both threads running throughout.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};
use lattice::{Record, Value};
use node::shard::{GossipBatch, Shard};
use placement::key_hash;

use super::{
    counter_add, key, locked_update, new_shard, preload_batch, thread_cpu, Key, Stripe, Workload,
    GOSSIP_EVERY, LOADER, STRIPES,
};

/// The θs of the model (the paper's 0.5 and 4, and two between).
const THETAS: [f64; 4] = [0.5, 1.0, 2.0, 4.0];
/// The θs whose write path is also measured on bigger rings, and those rings.
const THETAS_RINGS: [f64; 2] = [0.5, 4.0];
const RINGS: [usize; 2] = [8, 64];

type Group<'a> = BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Runs every cost bench.
pub(crate) fn costs(c: &mut Criterion, threads: usize, per_thread: usize) {
    let mut group = c.benchmark_group("cost");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(1));
    let clock = CpuClock::new();
    for theta in THETAS {
        // One thread's stream of updates, drawn as the contention bench draws them.
        let work = Workload::new(theta, 1, per_thread);
        let load = preload_batch(&work.keys);
        per_theta(&mut group, clock, &work, &load, 2);
        if THETAS_RINGS.contains(&theta) {
            for ring in RINGS {
                per_theta(&mut group, clock, &work, &load, ring);
            }
        }
    }
    hot(&mut group, clock, threads);
    group.finish();
}

/// Worker 0 and worker 1 of a ring of `ring`, every key on every worker, both loaded
/// (by gossip: see `preload_batch`).
fn replicated(load: &GossipBatch, ring: usize) -> (Shard, Shard) {
    let mut src = new_shard(ring, ring, 0);
    let mut dst = new_shard(ring, ring, 1);
    src.merge_gossip(load.clone()).expect("merged in memory");
    dst.merge_gossip(load.clone()).expect("merged in memory");
    (src, dst)
}

/// Times closures by the calling thread's CPU time.
#[derive(Clone, Copy)]
struct CpuClock {
    /// What reading the clock twice costs (the median of many reads), subtracted.
    overhead: Duration,
}

impl CpuClock {
    fn new() -> Self {
        let mut reads: Vec<Duration> = (0..1_001)
            .map(|_| {
                let a = thread_cpu();
                thread_cpu().saturating_sub(a)
            })
            .collect();
        reads.sort();
        CpuClock {
            overhead: reads[reads.len() / 2],
        }
    }

    /// Runs `f`; its result and the CPU time it took.
    fn time<R>(&self, f: impl FnOnce() -> R) -> (R, Duration) {
        let start = thread_cpu();
        let r = f();
        let took = thread_cpu().saturating_sub(start);
        (r, took.saturating_sub(self.overhead))
    }
}

/// Cycles through a stream of keys.
struct Cursor<'a> {
    keys: &'a [Key],
    next: usize,
}

impl<'a> Cursor<'a> {
    fn new(keys: &'a [Key]) -> Self {
        Cursor { keys, next: 0 }
    }

    fn take(&mut self) -> &'a Key {
        let k = &self.keys[self.next];
        self.next = (self.next + 1) % self.keys.len();
        k
    }
}

/// `GOSSIP_EVERY` untimed updates on `src`; its gossip batches, with the time `take_gossip`
/// took and the records for the destinations it made.
fn round(
    clock: CpuClock,
    src: &mut Shard,
    cursor: &mut Cursor,
) -> (Vec<node::shard::Outgoing>, Duration, u64) {
    for _ in 0..GOSSIP_EVERY {
        counter_add(src, cursor.take());
    }
    let (out, took) = clock.time(|| src.take_gossip());
    let records = out.iter().map(|o| o.entries.len() as u64).sum();
    (out, took, records)
}

/// Scales the time of `done` units to `iters` units (criterion asked for `iters`; rounds
/// come in whole batches).
fn per_iters(time: Duration, done: u64, iters: u64) -> Duration {
    time.mul_f64(iters as f64 / done.max(1) as f64)
}

fn per_theta(group: &mut Group, clock: CpuClock, work: &Workload, load: &GossipBatch, ring: usize) {
    let theta = work.theta;
    let stream = &work.updates[0];
    let suffix = if ring == 2 {
        String::new()
    } else {
        format!("-r{ring}")
    };
    let (mut src, mut dst) = replicated(load, ring);

    let mut cursor = Cursor::new(stream);
    group.bench_function(format!("zipf{theta}/shard-update-full{suffix}"), |b| {
        b.iter_custom(|iters| {
            let mut time = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let n = (iters - done).min(GOSSIP_EVERY as u64);
                time += clock
                    .time(|| {
                        for _ in 0..n {
                            counter_add(&mut src, cursor.take());
                        }
                    })
                    .1;
                done += n;
                drop(src.take_gossip());
            }
            time
        })
    });

    group.bench_function(format!("zipf{theta}/take-gossip{suffix}"), |b| {
        b.iter_custom(|iters| {
            let (mut time, mut done) = (Duration::ZERO, 0);
            while done < iters {
                let (_, took, records) = round(clock, &mut src, &mut cursor);
                time += took;
                done += records;
            }
            per_iters(time, done, iters)
        })
    });
    if ring != 2 {
        return;
    }

    group.bench_function(format!("zipf{theta}/merge-gossip"), |b| {
        b.iter_custom(|iters| {
            let (mut time, mut done) = (Duration::ZERO, 0);
            while done < iters {
                let (out, _, _) = round(clock, &mut src, &mut cursor);
                for o in out.into_iter().filter(|o| o.to.worker == 1) {
                    done += o.entries.len() as u64;
                    let batch = o.entries;
                    let (merged, took) = clock.time(|| dst.merge_gossip(batch));
                    merged.expect("merged in memory");
                    time += took;
                }
            }
            per_iters(time, done, iters)
        })
    });
    drop((src, dst));

    let mut rep1 = new_shard(1, 1, 0);
    rep1.merge_gossip(load.clone()).expect("merged in memory");
    group.bench_function(format!("zipf{theta}/shard-update-rep1"), |b| {
        b.iter_custom(|iters| {
            let rep1 = &mut rep1;
            let cursor = &mut cursor;
            clock
                .time(|| {
                    for _ in 0..iters {
                        counter_add(rep1, cursor.take());
                    }
                })
                .1
        })
    });
    drop(rep1);

    let stripes = loaded_stripes(&work.keys);
    group.bench_function(format!("zipf{theta}/locked-update"), |b| {
        b.iter_custom(|iters| {
            let cursor = &mut cursor;
            clock
                .time(|| {
                    for _ in 0..iters {
                        locked_update(&stripes, LOADER + 1, cursor.take());
                    }
                })
                .1
        })
    });
}

fn loaded_stripes(keys: &[Key]) -> Vec<Stripe> {
    let stripes: Vec<Stripe> = (0..STRIPES).map(|_| Mutex::default()).collect();
    for k in keys {
        locked_update(&stripes, LOADER, k);
    }
    stripes
}

/// Round trips per timed batch of the ping-pong.
const PING_BATCH: u64 = 16;
/// Spins before a waiting ping-pong thread yields (its partner may share its core).
const PING_SPINS: u32 = 1 << 14;

/// Two threads bounce `turn` `rounds` times (thread 0 writes odd values, thread 1 even
/// ones, each spinning until the other has written); thread 0's time per batch of
/// `PING_BATCH` round trips.
fn ping_pong(turn: &AtomicU64, rounds: u64) -> Vec<Duration> {
    let wait_for = |parity: u64| {
        let mut spins = 0u32;
        loop {
            let v = turn.load(Ordering::Acquire);
            if v % 2 == parity {
                return v;
            }
            spins += 1;
            if spins == PING_SPINS {
                spins = 0;
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    };
    thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..rounds {
                let v = wait_for(1);
                turn.store(v + 1, Ordering::Release);
            }
        });
        let mut batches = Vec::new();
        let mut done = 0;
        while done < rounds {
            let n = PING_BATCH.min(rounds - done);
            let start = Instant::now();
            for _ in 0..n {
                let v = wait_for(0);
                turn.store(v + 1, Ordering::Release);
            }
            // The last round trip of the batch: wait for the answer.
            wait_for(0);
            if n == PING_BATCH {
                batches.push(start.elapsed());
            }
            done += n;
        }
        batches
    })
}

/// `threads` threads each running `work(thread, n)` with `n` = `iters / threads` (at least
/// 1), released together; the wall time until the last is done.
fn together<F>(threads: usize, iters: u64, work: F) -> Duration
where
    F: Fn(usize, u64) + Sync,
{
    let each = (iters / threads as u64).max(1);
    let barrier = Barrier::new(threads + 1);
    thread::scope(|s| {
        for t in 0..threads {
            let (barrier, work) = (&barrier, &work);
            s.spawn(move || {
                barrier.wait();
                work(t, each);
            });
        }
        barrier.wait();
        let start = Instant::now();
        // The scope joins every thread before it returns.
        start
    })
    .elapsed()
    .mul_f64(iters as f64 / (each * threads as u64) as f64)
}

fn hot(group: &mut Group, clock: CpuClock, threads: usize) {
    let hot_key = key(0);
    let stripes: Vec<Stripe> = (0..STRIPES).map(|_| Mutex::default()).collect();
    let hot_updates = AtomicU64::new(0);
    group.bench_function("hot/locked-update", |b| {
        b.iter_custom(|iters| {
            let (_, took) = clock.time(|| {
                for _ in 0..iters {
                    locked_update(&stripes, LOADER + 1, &hot_key);
                }
            });
            hot_updates.fetch_add(iters, Ordering::Relaxed);
            took
        })
    });
    group.bench_function("hot/locked-handoff", |b| {
        b.iter_custom(|iters| {
            together(threads, iters, |t, n| {
                for _ in 0..n {
                    locked_update(&stripes, LOADER + 2 + t as u64, &hot_key);
                }
                hot_updates.fetch_add(n, Ordering::Relaxed);
            })
        })
    });
    group.bench_function("key-hash", |b| b.iter(|| key_hash(black_box(&hot_key[..]))));

    let line = AtomicU64::new(0);
    group.bench_function("atomic/uncontended", |b| {
        b.iter_custom(|iters| {
            clock
                .time(|| {
                    for _ in 0..iters {
                        line.fetch_add(1, Ordering::AcqRel);
                    }
                })
                .1
        })
    });
    group.bench_function("atomic/contended", |b| {
        b.iter_custom(|iters| {
            together(threads, iters, |_, n| {
                for _ in 0..n {
                    line.fetch_add(1, Ordering::AcqRel);
                }
            })
        })
    });
    group.bench_function("atomic/ping-pong", |b| {
        b.iter_custom(|iters| {
            let turn = AtomicU64::new(0);
            let rounds = (iters / 2).max(PING_BATCH);
            let batches = ping_pong(&turn, rounds);
            assert_eq!(turn.load(Ordering::Acquire), 2 * rounds, "a turn was lost");
            let fastest = batches.into_iter().min().unwrap_or_default();
            fastest.mul_f64(iters as f64 / (2 * PING_BATCH) as f64)
        })
    });
    // The hot benches touched one key (none if a filter skipped them), and every increment
    // of it counted.
    let stored: Vec<i128> = stripes
        .iter()
        .flat_map(|s| {
            let map = s.lock().expect("stripe poisoned");
            map.values().map(counter_of).collect::<Vec<_>>()
        })
        .collect();
    let updates = hot_updates.load(Ordering::Acquire);
    assert_eq!(
        stored.len(),
        usize::from(updates > 0),
        "the hot benches touch one key"
    );
    assert_eq!(
        stored.iter().sum::<i128>(),
        i128::from(updates),
        "hot-key updates lost"
    );
}

fn counter_of(record: &Record) -> i128 {
    match &record.value {
        Some(Value::Counter(c)) => c.value(),
        other => panic!("not a counter: {other:?}"),
    }
}
