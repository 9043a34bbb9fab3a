//! One worker's request handling without the network: `Shard::execute` per operation.
//!
//! The shard is pre-loaded with 100,000 string keys (16-byte keys, 100-byte LWW values),
//! plus 10,000 counter keys and 100 OR-set keys of 1,000 members each for the typed ops
//! (a key holds one type, so each op draws from keys of its own type):
//!
//! - `shard/get`: `Op::Get` of a string key (returns an owned copy of the value);
//! - `shard/exists`: `Op::Exists` of a string key;
//! - `shard/assign`: `Op::Assign` overwriting a string key with a new 100-byte value;
//! - `shard/counter-add`: `Op::CounterAdd { delta: 1 }` on a counter key;
//! - `shard/set-add`: `Op::SetAdd` of one existing member (a re-add: a new dot replaces the
//!   old one, so the sets stay at 1,000 members) to a 1,000-member OR-set;
//! - `shard/get+stats`: `shard/get` plus the worker's statistics counting the access
//!   (`node::stats::Recorder::access`, as the core does for every op it serves): the
//!   difference to `shard/get` is the statistics' cost per op (uniform keys: no hot key);
//! - `shard/stats-hot-key`: the statistics alone counting accesses of one key (a hot key:
//!   every access also finds it among the hot-key candidates);
//! - `shard/stats-uniform`: the statistics alone, keys drawn uniformly from the 100,000
//!   string keys (the common case: no key is hot);
//! - `shard/stats-1000-keys`: the statistics alone, keys drawn uniformly from 1,000 (few
//!   distinct keys: every key is among those the statistics track one by one).
//!
//! Keys (and members) are drawn uniformly before timing into a list that the timed loop
//! walks in order. One worker, no replication: no changeset, no gossip. The clock is the
//! system clock, as in the node.
//!
//! Run: `cargo bench -p latticekv-node --bench shard`.

/// The same allocator as the `latticekv` binary, so the numbers match the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use node::clock::SystemClock;
use node::op::{Condition, Op, OpResult};
use node::shard::{Shard, ShardConfig};
use node::view::{default_vector, ViewState};
use node::Limits;
use placement::ring::DEFAULT_VNODES;
use placement::{node_key, Replica};

/// String keys pre-loaded.
const STRING_KEYS: usize = 100_000;
/// Counter keys pre-loaded.
const COUNTER_KEYS: usize = 10_000;
/// OR-set keys pre-loaded, and members of each.
const SET_KEYS: usize = 100;
const SET_MEMBERS: usize = 1_000;
/// Bytes of a value.
const VALUE_LEN: usize = 100;
/// Length of the pre-drawn key sequence the timed loop cycles through (a power of two).
const SEQUENCE: usize = 1 << 16;

/// A 16-byte key: a 4-byte prefix and a 12-digit number.
fn key(prefix: &str, i: usize) -> [u8; 16] {
    let s = format!("{prefix}{i:012}");
    s.as_bytes().try_into().expect("16-byte key")
}

/// Passes a result through, failing the bench if the op failed (a branch, in the timed loop).
#[inline]
fn ok(r: OpResult) -> OpResult {
    assert!(!matches!(r, OpResult::Error(_)), "op failed: {r:?}");
    r
}

fn expect_int(r: OpResult) -> i64 {
    match r {
        OpResult::Int(n) => n,
        other => panic!("unexpected result {other:?}"),
    }
}

/// The pre-loaded shard and the key populations.
struct Fixture {
    shard: Shard,
    strings: Vec<[u8; 16]>,
    counters: Vec<[u8; 16]>,
    sets: Vec<[u8; 16]>,
    members: Vec<[u8; 16]>,
}

fn fixture() -> Fixture {
    let config = ShardConfig {
        me: Replica {
            node: node_key("bench"),
            worker: 0,
        },
        limits: Limits::default(),
        memory_budget: 8 << 30,
        max_changeset_keys: 1024,
        settle_ms: 0,
        tombstone_memory_ms: 0,
        disk_copy: Default::default(),
    };
    let view = ViewState::single_node("bench", 1, DEFAULT_VNODES, default_vector(1, 1));
    let mut shard = Shard::new(config, Arc::new(view), 1, Arc::new(SystemClock::default()));
    let strings: Vec<_> = (0..STRING_KEYS).map(|i| key("str:", i)).collect();
    let counters: Vec<_> = (0..COUNTER_KEYS).map(|i| key("cnt:", i)).collect();
    let sets: Vec<_> = (0..SET_KEYS).map(|i| key("set:", i)).collect();
    let members: Vec<_> = (0..SET_MEMBERS).map(|i| key("mem:", i)).collect();
    for (i, k) in strings.iter().enumerate() {
        let value = [b'a' + (i % 26) as u8; VALUE_LEN];
        let r = shard.execute(Op::Assign {
            key: &k[..],
            value: &value[..],
            condition: Condition::Always,
        });
        assert_eq!(expect_int(r), 1);
    }
    for k in &counters {
        expect_int(shard.execute(Op::CounterAdd {
            key: &k[..],
            delta: 1,
        }));
    }
    for k in &sets {
        let all: Vec<&[u8]> = members.iter().map(|m| &m[..]).collect();
        let added = expect_int(shard.execute(Op::SetAdd {
            key: &k[..],
            members: all,
        }));
        assert_eq!(added, SET_MEMBERS as i64);
    }
    let loaded = shard.stats().live_keys as usize;
    assert_eq!(loaded, STRING_KEYS + COUNTER_KEYS + SET_KEYS);
    Fixture {
        shard,
        strings,
        counters,
        sets,
        members,
    }
}

/// `SEQUENCE` indexes drawn uniformly from `0..n`, with a fixed seed.
fn draws(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..SEQUENCE).map(|_| rng.usize(..n)).collect()
}

fn shard_ops(c: &mut Criterion) {
    let Fixture {
        mut shard,
        strings,
        counters,
        sets,
        members,
    } = fixture();
    let string_draws = draws(strings.len(), 1);
    let counter_draws = draws(counters.len(), 2);
    let set_draws = draws(sets.len(), 3);
    let member_draws = draws(members.len(), 4);
    let new_value = [b'z'; VALUE_LEN];

    let mut group = c.benchmark_group("shard");
    group.throughput(Throughput::Elements(1));

    let mut at = 0;
    let mut next = move || {
        at = (at + 1) & (SEQUENCE - 1);
        at
    };
    group.bench_function("get", |b| {
        b.iter(|| {
            let k = &strings[string_draws[next()]];
            ok(shard.execute(Op::Get { key: &k[..] }))
        })
    });
    let mut stats = node::stats::Recorder::new(node::stats::StatsConfig::default(), 1, 0);
    group.bench_function("get+stats", |b| {
        b.iter(|| {
            let k = &strings[string_draws[next()]];
            stats.access(&k[..]);
            ok(shard.execute(Op::Get { key: &k[..] }))
        })
    });
    let hot = key("hot:", 0);
    group.bench_function("stats-hot-key", |b| b.iter(|| stats.access(&hot[..])));
    let mut stats = node::stats::Recorder::new(node::stats::StatsConfig::default(), 1, 0);
    group.bench_function("stats-uniform", |b| {
        b.iter(|| stats.access(&strings[string_draws[next()]][..]))
    });
    let few = draws(1_000, 5);
    let mut stats = node::stats::Recorder::new(node::stats::StatsConfig::default(), 1, 0);
    group.bench_function("stats-1000-keys", |b| {
        b.iter(|| stats.access(&strings[few[next()]][..]))
    });
    group.bench_function("exists", |b| {
        b.iter(|| {
            let k = &strings[string_draws[next()]];
            ok(shard.execute(Op::Exists { key: &k[..] }))
        })
    });
    group.bench_function("assign", |b| {
        b.iter(|| {
            let k = &strings[string_draws[next()]];
            ok(shard.execute(Op::Assign {
                key: &k[..],
                value: &new_value[..],
                condition: Condition::Always,
            }))
        })
    });
    group.bench_function("counter-add", |b| {
        b.iter(|| {
            let k = &counters[counter_draws[next()]];
            ok(shard.execute(Op::CounterAdd {
                key: &k[..],
                delta: 1,
            }))
        })
    });
    group.bench_function("set-add", |b| {
        b.iter(|| {
            let i = next();
            let k = &sets[set_draws[i]];
            let m = &members[member_draws[i]];
            ok(shard.execute(Op::SetAdd {
                key: &k[..],
                members: vec![&m[..]],
            }))
        })
    });
    group.finish();

    // The writes went where they should: nothing failed, the sets kept their size.
    assert_eq!(
        shard.stats().live_keys as usize,
        STRING_KEYS + COUNTER_KEYS + SET_KEYS
    );
    for k in &sets {
        assert_eq!(
            expect_int(shard.execute(Op::SetLen { key: &k[..] })),
            SET_MEMBERS as i64
        );
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = shard_ops
}
criterion_main!(benches);
