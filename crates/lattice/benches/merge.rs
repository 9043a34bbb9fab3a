//! Merge cost per lattice type: `merge/<type>/<size>`.
//!
//! Each bench merges a small delta (one new element, or one newer write) into a state of
//! `size` elements, as the store does for every write and every gossip entry it receives.
//! The values are wrapped in [`Value`], which is what the store holds (so the cost of the
//! type dispatch is included); `record` wraps a set value in a [`Record`] at the same epoch.
//! Registers (`lww`, `max`, `min`, `bool`, `priority`) only have size 1.
//!
//! Sizes mean: members for sets, keys for maps, actors for counters and sibling versions
//! (concurrent writes) for the causal registers. The causal registers stop at 1,000
//! siblings: their merge keeps an antichain with a quadratic domination check, and 10,000
//! concurrent siblings is not a state a real key reaches.
//!
//! `merge/orset-add-in-place/10000` and `merge/orset-add-via-delta/10000` compare
//! [`OrSet::add`] (in place, what the node does) with `merge(add_delta(..))` on a
//! 10,000-member set; both produce the new state and the delta to ship.
//!
//! `merge/orset-period-accumulate/200` and `merge/orset-period-receive/10000`: a gossip
//! period of one hot set, its 200 deltas merged into one changeset entry, then into a
//! replica's 10,000-member state.
//!
//! The state and the delta are cloned outside the timed section (`iter_batched`) and the
//! merged state is dropped outside it too.
//!
//! Run: `cargo bench -p latticekv-lattice --bench merge` (add a filter such as `merge/orset` to run a
//! subset).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use lattice::{
    Blob, Bool, CausalVersion, Counter, Lattice, LatticeType, Lww, Map, Max, Min, MultiKeyCausal,
    OrSet, OrderedSet, Priority, Record, Set, SingleKeyCausal, Timestamp, Value, VectorClock,
};

/// State sizes of the collection types.
const SIZES: [usize; 3] = [1, 100, 10_000];
/// State sizes of the causal registers (sibling versions; see the module docs).
const CAUSAL_SIZES: [usize; 3] = [1, 100, 1_000];
/// Bytes of a register value (as in the shard bench).
const VALUE_LEN: usize = 100;

/// A 16-byte member / map key. The state holds the even indexes and deltas use odd ones, so
/// a new element lands in the middle of the state's order, not at its end.
fn member(i: usize) -> Blob {
    let s = format!("member:{i:09}");
    debug_assert_eq!(s.len(), 16);
    s.into_bytes().into_boxed_slice()
}

/// A `VALUE_LEN`-byte register value.
fn value(fill: u8) -> Blob {
    vec![fill; VALUE_LEN].into_boxed_slice()
}

fn ts(ms: u64, writer: u64) -> Timestamp {
    Timestamp::new(ms << 16, writer)
}

/// The middle of a state's even indexes, plus one: an index the state does not hold.
fn new_index(size: usize) -> usize {
    (size / 2) * 2 + 1
}

/// Times `state.merge(delta)` for fresh copies of `state` and `delta`.
fn bench_merge<L: Lattice>(c: &mut Criterion, name: &str, size: usize, state: L, delta: L) {
    let batch = if size >= 10_000 {
        BatchSize::LargeInput
    } else {
        BatchSize::SmallInput
    };
    c.benchmark_group("merge")
        .bench_function(BenchmarkId::new(name, size), |b| {
            b.iter_batched(
                || (state.clone(), delta.clone()),
                |(mut s, d)| {
                    black_box(s.merge(d));
                    s
                },
                batch,
            )
        });
}

fn registers(c: &mut Criterion) {
    let name = |t: LatticeType| t.name();
    let lww = |t, w, f| Value::Lww(Lww::new(ts(t, w), value(f)));
    bench_merge(
        c,
        name(LatticeType::Lww),
        1,
        lww(1, 1, b'a'),
        lww(2, 2, b'b'),
    );
    bench_merge(
        c,
        name(LatticeType::Max),
        1,
        Value::Max(Max(10)),
        Value::Max(Max(11)),
    );
    bench_merge(
        c,
        name(LatticeType::Min),
        1,
        Value::Min(Min(10)),
        Value::Min(Min(9)),
    );
    bench_merge(
        c,
        name(LatticeType::Bool),
        1,
        Value::Bool(Bool(false)),
        Value::Bool(Bool(true)),
    );
    bench_merge(
        c,
        name(LatticeType::Priority),
        1,
        Value::Priority(Priority::new(2.0, value(b'a'))),
        Value::Priority(Priority::new(1.0, value(b'b'))),
    );
}

fn sets(c: &mut Criterion) {
    for size in SIZES {
        let members = || (0..size).map(|i| member(2 * i));
        let new = member(new_index(size));

        let set: Set<Blob> = members().collect();
        let delta: Set<Blob> = [new.clone()].into_iter().collect();
        bench_merge(
            c,
            LatticeType::Set.name(),
            size,
            Value::Set(set.clone()),
            Value::Set(delta),
        );

        let ordered: OrderedSet<Blob> = members().collect();
        let delta: OrderedSet<Blob> = [new.clone()].into_iter().collect();
        bench_merge(
            c,
            LatticeType::OrderedSet.name(),
            size,
            Value::OrderedSet(ordered),
            Value::OrderedSet(delta),
        );

        // An add from another replica (actor 2) that had the same state.
        let mut orset = OrSet::new();
        for m in members() {
            let _ = orset.add(1, m);
        }
        let delta = orset.add_delta(2, new.clone());
        bench_merge(
            c,
            LatticeType::OrSet.name(),
            size,
            Value::OrSet(Box::new(orset)),
            Value::OrSet(Box::new(delta)),
        );

        // The store's per-key record around the same set, delta at the same epoch.
        let epoch = ts(1, 1);
        let record = Record::new(epoch, Some(Value::Set(set)));
        let delta = Record::new(epoch, Some(Value::Set([new].into_iter().collect())));
        bench_merge(c, "record", size, record, delta);
    }
}

fn orset_add(c: &mut Criterion) {
    let size = 10_000;
    let mut state = OrSet::new();
    for i in 0..size {
        let _ = state.add(1, member(2 * i));
    }
    let new = member(new_index(size));
    let mut group = c.benchmark_group("merge");
    group.bench_function(BenchmarkId::new("orset-add-in-place", size), |b| {
        b.iter_batched(
            || (state.clone(), new.clone()),
            |(mut s, m)| {
                let delta = s.add(1, m);
                (s, delta)
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function(BenchmarkId::new("orset-add-via-delta", size), |b| {
        b.iter_batched(
            || (state.clone(), new.clone()),
            |(mut s, m)| {
                let delta = s.add_delta(1, m);
                black_box(s.merge(delta.clone()));
                (s, delta)
            },
            BatchSize::LargeInput,
        )
    });
}

/// A gossip period of one hot set: 200 re-adds of members of a 10,000-member set, written
/// by another actor. `orset-period-accumulate` merges their deltas into one (the changeset
/// of the key), `orset-period-receive` merges that into a replica's state.
fn orset_period(c: &mut Criterion) {
    let size = 10_000;
    let mut state = OrSet::new();
    for i in 0..size {
        let _ = state.add(1 + (i % 2) as u64, member(2 * i));
    }
    let replica = state.clone();
    let deltas: Vec<OrSet<Blob>> = (0..200)
        .map(|i| state.add(3, member(2 * ((i * 37) % size))))
        .collect();
    let mut period = OrSet::new();
    for d in &deltas {
        period.merge(d.clone());
    }
    let mut group = c.benchmark_group("merge");
    group.bench_function(BenchmarkId::new("orset-period-accumulate", 200), |b| {
        b.iter_batched(
            || deltas.clone(),
            |ds| {
                let mut acc = OrSet::new();
                for d in ds {
                    acc.merge(d);
                }
                acc
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function(BenchmarkId::new("orset-period-receive", size), |b| {
        b.iter_batched(
            || (replica.clone(), period.clone()),
            |(mut s, p)| {
                black_box(s.merge(p));
                s
            },
            BatchSize::LargeInput,
        )
    });
}

fn counters_and_maps(c: &mut Criterion) {
    for size in SIZES {
        // `size` actors, each with some increments; the delta is a newer cumulative pair of
        // an existing actor (the shape of a counter write's delta).
        let counter = Counter::from_entries((0..size as u64).map(|a| (a, (a + 5, a))));
        let delta = counter.add_delta(size as u64 / 2, 1).expect("no overflow");
        bench_merge(
            c,
            LatticeType::Counter.name(),
            size,
            Value::Counter(counter),
            Value::Counter(delta),
        );

        // `size` keys holding 16-byte LWW registers; the delta adds one key.
        let entry = |i: usize| {
            let v = Value::Lww(Lww::new(ts(1, 1), member(i)));
            (member(i), v)
        };
        let map: Map<Blob, Value> = (0..size).map(|i| entry(2 * i)).collect();
        let delta: Map<Blob, Value> = [entry(new_index(size))].into_iter().collect();
        bench_merge(
            c,
            LatticeType::Map.name(),
            size,
            Value::Map(map),
            Value::Map(delta),
        );
    }
}

fn causal(c: &mut Criterion) {
    // Sibling `i` is a write by actor `i` that saw nothing: all siblings are concurrent. The
    // delta is one more concurrent write, so the merged state keeps `size + 1` siblings.
    let clock = |actor: u64| -> VectorClock { [(actor, 1)].into_iter().collect() };
    let deps = |actor: u64| -> BTreeMap<Blob, VectorClock> {
        (0..2)
            .map(|d| (member(d), [(actor + 1, 1)].into_iter().collect()))
            .collect()
    };
    let version = |actor: u64| CausalVersion {
        clock: clock(actor),
        deps: deps(actor),
        value: value(actor as u8),
    };
    for size in CAUSAL_SIZES {
        let n = size as u64;
        let single = SingleKeyCausal::from_versions((0..n).map(|a| (clock(a), value(a as u8))));
        let delta = SingleKeyCausal::new(clock(n), value(b'z'));
        bench_merge(
            c,
            LatticeType::SingleKeyCausal.name(),
            size,
            Value::SingleKeyCausal(single),
            Value::SingleKeyCausal(delta),
        );

        let multi = MultiKeyCausal::from_versions((0..n).map(version));
        let delta = MultiKeyCausal::new(version(n));
        bench_merge(
            c,
            LatticeType::MultiKeyCausal.name(),
            size,
            Value::MultiKeyCausal(multi),
            Value::MultiKeyCausal(delta),
        );
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = registers, sets, orset_add, orset_period, counters_and_maps, causal
}
criterion_main!(benches);
