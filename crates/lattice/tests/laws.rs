//! Property tests: every lattice type satisfies the lattice laws (associativity,
//! commutativity, idempotence, a correct changed flag) and converges when two replicas receive
//! the same updates in different orders with duplicates.
//!
//! States are REACHABLE: each test runs a random history of operations by 3 actors on 3
//! replicas, interleaved with random state merges between replicas and random (re)deliveries
//! of earlier deltas (a [`Sim`]), and checks the laws on the replica states and the deltas
//! the operations produced. Value spaces are small so that
//! collisions (same member, same timestamp, concurrent writes) are frequent.

mod common;

use std::fmt::Debug;

use common::{converges, delivery_order, laws_hold};
use lattice::{
    Blob, Bool, CausalContext, CausalWriter, Counter, Dot, Expiry, FieldReg, Hash, Hlc, Lattice,
    LatticeType, List, Lww, Map, Max, Min, MultiKeyCausal, OrSet, OrderedSet, Priority, Record,
    Score, Set, SingleKeyCausal, SortedSet, Timestamp, Value, VectorClock,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

const ACTORS: usize = 3;
const REPLICAS: usize = 3;
const MAX_STEPS: usize = 24;

/// A lattice type with the operations that produce its reachable states.
trait Sim: Lattice + 'static {
    /// One user operation.
    type Op: Clone + Debug + 'static;
    /// Per-actor state kept across operations (a clock, a causal writer).
    type Writer;
    /// True if an actor may read from (and write through) any replica, possibly stale;
    /// otherwise actor `i` always works on replica `i`.
    const STALE_READS: bool = false;

    /// The initial state of every replica.
    fn bottom() -> Self;
    /// The per-actor state of `actor` before its first operation.
    fn writer(actor: u64) -> Self::Writer;
    /// The operations.
    fn op() -> BoxedStrategy<Self::Op>;
    /// The delta of `op` by `actor` on a replica holding `read`; `None` if the operation is
    /// refused (overflow, type mismatch, nothing to remove).
    fn apply(w: &mut Self::Writer, actor: u64, read: &Self, op: &Self::Op) -> Option<Self>;
}

#[derive(Clone, Debug)]
enum Step<O> {
    Op {
        actor: usize,
        replica: usize,
        op: O,
    },
    /// Replica `from` sends its whole state to replica `to`.
    Sync {
        from: usize,
        to: usize,
    },
    /// An earlier delta is delivered (again, or for the first time) to replica `to`.
    Deliver {
        delta: Index,
        to: usize,
    },
}

/// The outcome of a random history: the final replica states and every delta produced.
#[derive(Clone, Debug)]
struct History<L> {
    replicas: Vec<L>,
    deltas: Vec<L>,
}

impl<L: Sim> History<L> {
    /// Bottom, the replicas and the deltas: the states the laws are checked on.
    fn pool(&self) -> Vec<L> {
        let mut pool = vec![L::bottom()];
        pool.extend(self.replicas.iter().cloned());
        pool.extend(self.deltas.iter().cloned());
        pool
    }
}

fn run<L: Sim>(steps: Vec<Step<L::Op>>) -> History<L> {
    let mut replicas: Vec<L> = (0..REPLICAS).map(|_| L::bottom()).collect();
    let mut writers: Vec<L::Writer> = (0..ACTORS).map(|a| L::writer(a as u64)).collect();
    let mut deltas = Vec::new();
    for step in steps {
        match step {
            Step::Op { actor, replica, op } => {
                let replica = if L::STALE_READS { replica } else { actor };
                let read = &replicas[replica];
                if let Some(delta) = L::apply(&mut writers[actor], actor as u64, read, &op) {
                    replicas[replica].merge(delta.clone());
                    deltas.push(delta);
                }
            }
            Step::Sync { from, to } => {
                let state = replicas[from].clone();
                replicas[to].merge(state);
            }
            Step::Deliver { delta, to } => {
                if !deltas.is_empty() {
                    replicas[to].merge_ref(delta.get(&deltas));
                }
            }
        }
    }
    History { replicas, deltas }
}

fn history<L: Sim>() -> impl Strategy<Value = History<L>> {
    let step = prop_oneof![
        3 => (0..ACTORS, 0..REPLICAS, L::op())
            .prop_map(|(actor, replica, op)| Step::Op { actor, replica, op }),
        1 => (0..REPLICAS, 0..REPLICAS).prop_map(|(from, to)| Step::Sync { from, to }),
        1 => (any::<Index>(), 0..REPLICAS).prop_map(|(delta, to)| Step::Deliver { delta, to }),
    ];
    vec(step, 1..MAX_STEPS).prop_map(run::<L>)
}

/// A history and two delivery orders of its pool.
fn history_and_orders<L: Sim + Debug>(
) -> impl Strategy<Value = (History<L>, Vec<usize>, Vec<usize>)> {
    history::<L>().prop_flat_map(|h| {
        let n = h.pool().len();
        (Just(h), delivery_order(n), delivery_order(n))
    })
}

fn blob(b: u8) -> Blob {
    Box::new([b])
}

macro_rules! lattice_laws {
    ($name:ident, $ty:ty) => {
        mod $name {
            use super::*;

            proptest! {
                #[test]
                fn laws(h in history::<$ty>(), i: Index, j: Index, k: Index) {
                    let pool = h.pool();
                    laws_hold(i.get(&pool), j.get(&pool), k.get(&pool))?;
                }

                #[test]
                fn convergence((h, order_a, order_b) in history_and_orders::<$ty>()) {
                    let pool = h.pool();
                    converges(&<$ty as Sim>::bottom(), &pool, &order_a, &order_b)?;
                    // Replicas that exchange their states end equal too.
                    let mut all = <$ty as Sim>::bottom();
                    for r in &h.replicas {
                        all.merge_ref(r);
                    }
                    for r in &h.replicas {
                        let mut synced = r.clone();
                        for other in &h.replicas {
                            synced.merge_ref(other);
                        }
                        prop_assert_eq!(&synced, &all);
                    }
                }
            }
        }
    };
}

// ---- simple types ------------------------------------------------------------------------

impl Sim for Lww {
    type Op = (u64, u64, u8);
    type Writer = ();

    fn bottom() -> Self {
        Lww::default()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<Self::Op> {
        // Small times and writers: equal timestamps with different values happen.
        (0..3u64, 0..2u64, 0..3u8).boxed()
    }
    fn apply(_: &mut (), _: u64, _: &Self, &(time, writer, v): &Self::Op) -> Option<Self> {
        Some(Lww::new(Timestamp::new(time, writer), blob(v)))
    }
}

impl Sim for Expiry {
    type Op = (u64, u64, Option<u64>);
    type Writer = ();

    fn bottom() -> Self {
        Expiry::default()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<Self::Op> {
        // Small times and writers: equal timestamps with different deadlines happen.
        (0..3u64, 0..2u64, proptest::option::of(0..3u64)).boxed()
    }
    fn apply(_: &mut (), _: u64, _: &Self, &(time, writer, at): &Self::Op) -> Option<Self> {
        Some(Expiry::new(Timestamp::new(time, writer), at))
    }
}

impl Sim for Set<Blob> {
    type Op = u8;
    type Writer = ();

    fn bottom() -> Self {
        Set::new()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<u8> {
        (0..4u8).boxed()
    }
    fn apply(_: &mut (), _: u64, _: &Self, &m: &u8) -> Option<Self> {
        Some([blob(m)].into_iter().collect())
    }
}

impl Sim for OrderedSet<Blob> {
    type Op = u8;
    type Writer = ();

    fn bottom() -> Self {
        OrderedSet::new()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<u8> {
        (0..4u8).boxed()
    }
    fn apply(_: &mut (), _: u64, _: &Self, &m: &u8) -> Option<Self> {
        Some([blob(m)].into_iter().collect())
    }
}

impl Sim for Max<i64> {
    type Op = i64;
    type Writer = ();

    fn bottom() -> Self {
        Max(i64::MIN)
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<i64> {
        (-3..3i64).boxed()
    }
    fn apply(_: &mut (), _: u64, _: &Self, &v: &i64) -> Option<Self> {
        Some(Max(v))
    }
}

impl Sim for Min<i64> {
    type Op = i64;
    type Writer = ();

    fn bottom() -> Self {
        Min(i64::MAX)
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<i64> {
        (-3..3i64).boxed()
    }
    fn apply(_: &mut (), _: u64, _: &Self, &v: &i64) -> Option<Self> {
        Some(Min(v))
    }
}

impl Sim for Bool {
    type Op = bool;
    type Writer = ();

    fn bottom() -> Self {
        Bool(false)
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<bool> {
        any::<bool>().boxed()
    }
    fn apply(_: &mut (), _: u64, _: &Self, &v: &bool) -> Option<Self> {
        Some(Bool(v))
    }
}

const PRIORITIES: [f64; 8] = [
    f64::NAN,
    -f64::NAN,
    -0.0,
    0.0,
    1.0,
    -1.0,
    f64::INFINITY,
    1.0,
];

impl Sim for Priority {
    type Op = (usize, u8);
    type Writer = ();

    fn bottom() -> Self {
        // Loses to every value the operations produce: the largest positive NaN, with value
        // bytes above the one-byte values used here.
        Priority::new(f64::from_bits(u64::MAX >> 1), Box::new([u8::MAX; 4]))
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<Self::Op> {
        (0..PRIORITIES.len(), 0..3u8).boxed()
    }
    fn apply(_: &mut (), _: u64, _: &Self, &(p, v): &Self::Op) -> Option<Self> {
        Some(Priority::new(PRIORITIES[p], blob(v)))
    }
}

// ---- Redis hashes and sorted sets --------------------------------------------------------

/// Scores, with −0.0 next to 0.0 and the infinities (NaN is refused before a write).
const SCORES: [f64; 6] = [-0.0, 0.0, 1.0, -1.5, f64::INFINITY, f64::NEG_INFINITY];

/// A field write (`Some(v)`) or removal (`None`) at small times, so writes collide.
type FieldOp = (u8, Option<u8>, u64);

fn field_op(values: usize) -> BoxedStrategy<FieldOp> {
    (0..3u8, proptest::option::of(0..values as u8), 0..3u64).boxed()
}

fn hash_delta(actor: u64, &(f, v, t): &FieldOp) -> Hash {
    Hash::from_entries([(
        blob(f),
        FieldReg::new(Timestamp::new(t, actor), v.map(blob)),
    )])
}

fn zset_delta(actor: u64, &(m, s, t): &FieldOp) -> SortedSet {
    let score = s.map(|i| Score(SCORES[i as usize]));
    SortedSet::from_entries([(blob(m), FieldReg::new(Timestamp::new(t, actor), score))])
}

impl Sim for Hash {
    type Op = FieldOp;
    type Writer = ();

    fn bottom() -> Self {
        Hash::new()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<Self::Op> {
        field_op(3)
    }
    fn apply(_: &mut (), actor: u64, _: &Self, op: &Self::Op) -> Option<Self> {
        Some(hash_delta(actor, op))
    }
}

impl Sim for SortedSet {
    type Op = FieldOp;
    type Writer = ();

    fn bottom() -> Self {
        SortedSet::new()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<Self::Op> {
        field_op(SCORES.len())
    }
    fn apply(_: &mut (), actor: u64, _: &Self, op: &Self::Op) -> Option<Self> {
        Some(zset_delta(actor, op))
    }
}

// ---- counters and maps -------------------------------------------------------------------

fn counter_delta() -> BoxedStrategy<i64> {
    prop_oneof![8 => -3..4i64, 1 => Just(i64::MAX), 1 => Just(i64::MIN)].boxed()
}

impl Sim for Counter {
    type Op = i64;
    type Writer = ();

    fn bottom() -> Self {
        Counter::new()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<i64> {
        counter_delta()
    }
    fn apply(_: &mut (), actor: u64, read: &Self, &d: &i64) -> Option<Self> {
        read.add_delta(actor, d)
    }
}

impl Sim for Map<Blob, Counter> {
    type Op = (u8, i64);
    type Writer = ();

    fn bottom() -> Self {
        Map::new()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<Self::Op> {
        (0..3u8, counter_delta()).boxed()
    }
    fn apply(_: &mut (), actor: u64, read: &Self, &(k, d): &Self::Op) -> Option<Self> {
        let key = blob(k);
        let delta = match read.get(&key) {
            Some(c) => c.add_delta(actor, d)?,
            None => Counter::new().add_delta(actor, d)?,
        };
        Some([(key, delta)].into_iter().collect())
    }
}

// ---- OR-set, clocks ----------------------------------------------------------------------

#[derive(Clone, Debug)]
enum SetOp {
    Add(u8),
    Remove(u8),
}

fn set_op() -> impl Strategy<Value = SetOp> {
    prop_oneof![
        (0..4u8).prop_map(SetOp::Add),
        (0..4u8).prop_map(SetOp::Remove)
    ]
}

fn apply_set_op(actor: u64, read: &OrSet<Blob>, op: &SetOp) -> OrSet<Blob> {
    match op {
        SetOp::Add(m) => read.add_delta(actor, blob(*m)),
        SetOp::Remove(m) => read.remove_delta(&blob(*m)),
    }
}

impl Sim for OrSet<Blob> {
    type Op = SetOp;
    type Writer = ();

    fn bottom() -> Self {
        OrSet::new()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<SetOp> {
        set_op().boxed()
    }
    fn apply(_: &mut (), actor: u64, read: &Self, op: &SetOp) -> Option<Self> {
        Some(apply_set_op(actor, read, op))
    }
}

// ---- lists (helper B) ----

#[derive(Clone, Debug)]
enum ListOp {
    PushFront(u8),
    PushBack(u8),
    /// Insert before (false) / after (true) the element at this index (mod length).
    Insert(u8, bool, u8),
    /// Remove the element at this index (mod length).
    Remove(u8),
    /// Replace the element at this index (mod length).
    Set(u8, u8),
}

impl Sim for List {
    type Op = (u64, ListOp);
    type Writer = ();

    fn bottom() -> Self {
        List::new()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<Self::Op> {
        let op = prop_oneof![
            (0..3u8).prop_map(ListOp::PushFront),
            (0..3u8).prop_map(ListOp::PushBack),
            (0..4u8, any::<bool>(), 0..3u8).prop_map(|(i, a, v)| ListOp::Insert(i, a, v)),
            (0..4u8).prop_map(ListOp::Remove),
            (0..4u8, 0..3u8).prop_map(|(i, v)| ListOp::Set(i, v)),
        ];
        (1..4u64, op).boxed()
    }
    fn apply(_: &mut (), actor: u64, read: &Self, (time, op): &Self::Op) -> Option<Self> {
        let mut l = read.clone();
        let ts = Timestamp::new(*time, actor);
        let at = |i: u8| {
            (!read.is_empty()).then(|| read.pos_at(i64::from(i) % read.len() as i64).cloned())?
        };
        match op {
            ListOp::PushFront(v) => l.push_front(actor, ts, blob(*v)).ok(),
            ListOp::PushBack(v) => l.push_back(actor, ts, blob(*v)).ok(),
            ListOp::Insert(i, after, v) => l.insert_at(&at(*i)?, *after, actor, ts, blob(*v)).ok(),
            ListOp::Remove(i) => l.remove(&at(*i)?).map(|(_, d)| d),
            ListOp::Set(i, v) => l.set(&at(*i)?, ts, blob(*v)),
        }
    }
}

#[derive(Clone, Debug)]
enum ClockOp {
    /// The actor's next event, on top of what it read.
    Next,
    /// A single entry or dot, possibly with a gap.
    Entry(u64, u64),
}

fn clock_op() -> BoxedStrategy<ClockOp> {
    prop_oneof![
        Just(ClockOp::Next),
        (0..3u64, 0..5u64).prop_map(|(a, c)| ClockOp::Entry(a, c))
    ]
    .boxed()
}

impl Sim for VectorClock {
    type Op = ClockOp;
    type Writer = ();

    fn bottom() -> Self {
        VectorClock::new()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<ClockOp> {
        clock_op()
    }
    fn apply(_: &mut (), actor: u64, read: &Self, op: &ClockOp) -> Option<Self> {
        Some(match *op {
            ClockOp::Next => {
                let mut next = read.clone();
                next.increment(actor);
                next
            }
            ClockOp::Entry(a, c) => [(a, c)].into_iter().collect(),
        })
    }
}

impl Sim for CausalContext {
    type Op = ClockOp;
    type Writer = ();

    fn bottom() -> Self {
        CausalContext::new()
    }
    fn writer(_: u64) {}
    fn op() -> BoxedStrategy<ClockOp> {
        clock_op()
    }
    fn apply(_: &mut (), actor: u64, read: &Self, op: &ClockOp) -> Option<Self> {
        let dot = match *op {
            ClockOp::Next => read.next_dot(actor),
            ClockOp::Entry(a, c) => Dot::new(a, c),
        };
        let mut delta = CausalContext::new();
        delta.insert(dot);
        Some(delta)
    }
}

// ---- causal registers --------------------------------------------------------------------

impl Sim for SingleKeyCausal {
    type Op = u8;
    type Writer = CausalWriter;
    // Clients read from any replica, possibly stale.
    const STALE_READS: bool = true;

    fn bottom() -> Self {
        SingleKeyCausal::default()
    }
    fn writer(actor: u64) -> CausalWriter {
        CausalWriter::new(actor)
    }
    fn op() -> BoxedStrategy<u8> {
        (0..3u8).boxed()
    }
    fn apply(w: &mut CausalWriter, _: u64, read: &Self, &v: &u8) -> Option<Self> {
        Some(SingleKeyCausal::new(w.next_clock(&read.clock()), blob(v)))
    }
}

type Deps = Vec<(u8, Vec<(u64, u64)>)>;

fn deps() -> impl Strategy<Value = Deps> {
    vec((0..3u8, vec((0..3u64, 1..3u64), 0..3)), 0..3)
}

fn to_deps(deps: &Deps) -> impl Iterator<Item = (Blob, VectorClock)> + '_ {
    deps.iter()
        .map(|(k, clock)| (blob(*k), clock.iter().copied().collect()))
}

impl Sim for MultiKeyCausal {
    type Op = (u8, Deps);
    type Writer = CausalWriter;
    const STALE_READS: bool = true;

    fn bottom() -> Self {
        MultiKeyCausal::default()
    }
    fn writer(actor: u64) -> CausalWriter {
        CausalWriter::new(actor)
    }
    fn op() -> BoxedStrategy<Self::Op> {
        (0..3u8, deps()).boxed()
    }
    fn apply(w: &mut CausalWriter, _: u64, read: &Self, (v, deps): &Self::Op) -> Option<Self> {
        let read = (!read.is_empty()).then_some(read);
        Some(MultiKeyCausal::next_version(
            read,
            w,
            to_deps(deps),
            blob(*v),
        ))
    }
}

// ---- dynamically typed values and records ------------------------------------------------

/// An operation on one value of any type.
#[derive(Clone, Debug)]
enum LeafOp {
    Lww(u64, u8),
    Set(u8),
    OrderedSet(u8),
    OrSet(SetOp),
    Max(i64),
    Min(i64),
    Bool(bool),
    Counter(i64),
    Priority(usize, u8),
    Causal(u8),
    MultiCausal(u8, Deps),
    // Redis hashes and sorted sets.
    Hash(FieldOp),
    SortedSet(FieldOp),
}

impl LeafOp {
    fn lattice_type(&self) -> LatticeType {
        match self {
            LeafOp::Lww(..) => LatticeType::Lww,
            LeafOp::Set(_) => LatticeType::Set,
            LeafOp::OrderedSet(_) => LatticeType::OrderedSet,
            LeafOp::OrSet(_) => LatticeType::OrSet,
            LeafOp::Max(_) => LatticeType::Max,
            LeafOp::Min(_) => LatticeType::Min,
            LeafOp::Bool(_) => LatticeType::Bool,
            LeafOp::Counter(_) => LatticeType::Counter,
            LeafOp::Priority(..) => LatticeType::Priority,
            LeafOp::Causal(_) => LatticeType::SingleKeyCausal,
            LeafOp::MultiCausal(..) => LatticeType::MultiKeyCausal,
            LeafOp::Hash(_) => LatticeType::Hash,
            LeafOp::SortedSet(_) => LatticeType::SortedSet,
        }
    }
}

fn leaf_op() -> BoxedStrategy<LeafOp> {
    prop_oneof![
        (0..3u64, 0..3u8).prop_map(|(t, v)| LeafOp::Lww(t, v)),
        (0..3u8).prop_map(LeafOp::Set),
        (0..3u8).prop_map(LeafOp::OrderedSet),
        set_op().prop_map(LeafOp::OrSet),
        (-2..2i64).prop_map(LeafOp::Max),
        (-2..2i64).prop_map(LeafOp::Min),
        any::<bool>().prop_map(LeafOp::Bool),
        counter_delta().prop_map(LeafOp::Counter),
        (0..PRIORITIES.len(), 0..3u8).prop_map(|(p, v)| LeafOp::Priority(p, v)),
        (0..3u8).prop_map(LeafOp::Causal),
        (0..3u8, deps()).prop_map(|(v, d)| LeafOp::MultiCausal(v, d)),
        field_op(3).prop_map(LeafOp::Hash),
        field_op(SCORES.len()).prop_map(LeafOp::SortedSet),
    ]
    .boxed()
}

/// The delta of `op` by `actor` on a value `read` (absent if `None`). Like the store, an
/// operation on a value of another type is refused, except on the bottom (`Lww::default()`),
/// which every replica starts from; mixed types then come from concurrent writes.
fn apply_leaf(
    w: &mut CausalWriter,
    actor: u64,
    read: Option<&Value>,
    op: &LeafOp,
) -> Option<Value> {
    let read = read.filter(|v| **v != Value::Lww(Lww::default()));
    if read.is_some_and(|v| v.lattice_type() != op.lattice_type()) {
        return None;
    }
    Some(match op {
        LeafOp::Lww(t, v) => Value::Lww(Lww::new(Timestamp::new(*t, actor), blob(*v))),
        LeafOp::Set(m) => Value::Set([blob(*m)].into_iter().collect()),
        LeafOp::OrderedSet(m) => Value::OrderedSet([blob(*m)].into_iter().collect()),
        LeafOp::OrSet(op) => {
            let current = match read {
                Some(Value::OrSet(s)) => (**s).clone(),
                _ => OrSet::new(),
            };
            Value::OrSet(Box::new(apply_set_op(actor, &current, op)))
        }
        LeafOp::Max(v) => Value::Max(Max(*v)),
        LeafOp::Min(v) => Value::Min(Min(*v)),
        LeafOp::Bool(b) => Value::Bool(Bool(*b)),
        LeafOp::Counter(d) => Value::Counter(match read {
            Some(Value::Counter(c)) => c.add_delta(actor, *d)?,
            _ => Counter::new().add_delta(actor, *d)?,
        }),
        LeafOp::Priority(p, v) => Value::Priority(Priority::new(PRIORITIES[*p], blob(*v))),
        LeafOp::Causal(v) => {
            let clock = match read {
                Some(Value::SingleKeyCausal(c)) => c.clock(),
                _ => VectorClock::new(),
            };
            Value::SingleKeyCausal(SingleKeyCausal::new(w.next_clock(&clock), blob(*v)))
        }
        LeafOp::MultiCausal(v, deps) => {
            let current = match read {
                Some(Value::MultiKeyCausal(c)) => Some(c),
                _ => None,
            };
            Value::MultiKeyCausal(MultiKeyCausal::next_version(
                current,
                w,
                to_deps(deps),
                blob(*v),
            ))
        }
        LeafOp::Hash(op) => Value::Hash(Box::new(hash_delta(actor, op))),
        LeafOp::SortedSet(op) => Value::SortedSet(Box::new(zset_delta(actor, op))),
    })
}

#[derive(Clone, Debug)]
enum ValueOp {
    Leaf(LeafOp),
    /// An operation on the value at a key of a map.
    Map(u8, LeafOp),
}

impl Sim for Value {
    type Op = ValueOp;
    type Writer = CausalWriter;

    fn bottom() -> Self {
        Value::Lww(Lww::default())
    }
    fn writer(actor: u64) -> CausalWriter {
        CausalWriter::new(actor)
    }
    fn op() -> BoxedStrategy<ValueOp> {
        prop_oneof![
            3 => leaf_op().prop_map(ValueOp::Leaf),
            1 => (0..2u8, leaf_op()).prop_map(|(k, op)| ValueOp::Map(k, op)),
        ]
        .boxed()
    }
    fn apply(w: &mut CausalWriter, actor: u64, read: &Self, op: &ValueOp) -> Option<Self> {
        match op {
            ValueOp::Leaf(op) => apply_leaf(w, actor, Some(read), op),
            ValueOp::Map(k, op) => {
                let key = blob(*k);
                let inner = match read {
                    Value::Map(m) => m.get(&key),
                    v if *v == Value::Lww(Lww::default()) => None,
                    _ => return None,
                };
                let delta = apply_leaf(w, actor, inner, op)?;
                Some(Value::Map([(key, delta)].into_iter().collect()))
            }
        }
    }
}

impl Sim for Map<Blob, Value> {
    type Op = (u8, LeafOp);
    type Writer = CausalWriter;

    fn bottom() -> Self {
        Map::new()
    }
    fn writer(actor: u64) -> CausalWriter {
        CausalWriter::new(actor)
    }
    fn op() -> BoxedStrategy<Self::Op> {
        (0..3u8, leaf_op()).boxed()
    }
    fn apply(w: &mut CausalWriter, actor: u64, read: &Self, (k, op): &Self::Op) -> Option<Self> {
        let key = blob(*k);
        let delta = apply_leaf(w, actor, read.get(&key), op)?;
        Some([(key, delta)].into_iter().collect())
    }
}

#[derive(Clone, Debug)]
enum RecordOp {
    /// Delete at physical time `ms`.
    Delete(u64),
    /// An LWW write at physical time `ms`.
    Assign(u64, u8),
    /// A write of another type, into the key's current epoch.
    Write(LeafOp),
    /// Set (or clear, `None`) the key's deadline at physical time `ms`, in its current
    /// epoch.
    Expire(u64, Option<u64>),
}

/// The node's writer state: its hybrid logical clock and its causal writer.
struct NodeWriter {
    hlc: Hlc,
    causal: CausalWriter,
}

impl Sim for Record {
    type Op = RecordOp;
    type Writer = NodeWriter;

    fn bottom() -> Self {
        Record::default()
    }
    fn writer(actor: u64) -> NodeWriter {
        NodeWriter {
            hlc: Hlc::new(actor),
            causal: CausalWriter::new(actor),
        }
    }
    fn op() -> BoxedStrategy<RecordOp> {
        prop_oneof![
            1 => (0..3u64).prop_map(RecordOp::Delete),
            1 => (0..3u64, 0..3u8).prop_map(|(ms, v)| RecordOp::Assign(ms, v)),
            3 => leaf_op().prop_map(RecordOp::Write),
            1 => (0..3u64, proptest::option::of(0..3u64))
                .prop_map(|(ms, at)| RecordOp::Expire(ms, at)),
        ]
        .boxed()
    }
    /// Follows the node's epoch convention (see `Record`).
    fn apply(w: &mut NodeWriter, actor: u64, read: &Self, op: &RecordOp) -> Option<Self> {
        w.hlc.observe(read.epoch);
        match op {
            RecordOp::Delete(ms) => Some(Record::tombstone(w.hlc.tick(*ms))),
            RecordOp::Assign(ms, v) | RecordOp::Write(LeafOp::Lww(ms, v)) => {
                let ts = w.hlc.tick(*ms);
                Some(Record::new(ts, Some(Value::Lww(Lww::new(ts, blob(*v))))))
            }
            RecordOp::Expire(ms, at) => {
                let mut delta = Record::tombstone(read.epoch);
                delta.expiry = Some(Box::new(Expiry::new(w.hlc.tick(*ms), *at)));
                Some(delta)
            }
            RecordOp::Write(op) => {
                let same_incarnation = match &read.value {
                    None => true,
                    Some(v) => v.lattice_type() == op.lattice_type(),
                };
                let (epoch, current) = if same_incarnation {
                    (read.epoch, read.value.as_ref())
                } else {
                    (w.hlc.tick(0), None)
                };
                let value = apply_leaf(&mut w.causal, actor, current, op)?;
                Some(Record::new(epoch, Some(value)))
            }
        }
    }
}

lattice_laws!(lww, Lww);
lattice_laws!(expiry, Expiry);
lattice_laws!(set, Set<Blob>);
lattice_laws!(ordered_set, OrderedSet<Blob>);
lattice_laws!(orset, OrSet<Blob>);
lattice_laws!(max, Max<i64>);
lattice_laws!(min, Min<i64>);
lattice_laws!(bool, Bool);
lattice_laws!(counter, Counter);
lattice_laws!(map_of_counters, Map<Blob, Counter>);
lattice_laws!(map_of_values, Map<Blob, Value>);
lattice_laws!(priority, Priority);
lattice_laws!(single_key_causal, SingleKeyCausal);
lattice_laws!(multi_key_causal, MultiKeyCausal);
lattice_laws!(hash, Hash);
lattice_laws!(sorted_set, SortedSet);
lattice_laws!(value, Value);
lattice_laws!(record, Record);
lattice_laws!(vector_clock, VectorClock);
lattice_laws!(causal_context, CausalContext);
// ---- lists (helper B) ----
lattice_laws!(list, List);

/// Every state a reachable OR-set history produces keeps its entry dots inside its context.
#[test]
fn orset_states_are_reachable() {
    proptest!(|(h in history::<OrSet<Blob>>())| {
        for s in h.pool() {
            for m in s.iter() {
                for d in s.dots(m).into_iter().flatten() {
                    prop_assert!(s.context().contains(d));
                }
            }
        }
    });
}

/// A sorted set's order index always holds exactly its live registers, ordered as Redis
/// orders them, whatever merges produced the state.
#[test]
fn sorted_set_index_follows_registers() {
    proptest!(|(h in history::<SortedSet>())| {
        for z in h.pool() {
            let mut expected: Vec<(f64, Blob)> = z
                .entries()
                .filter_map(|(m, r)| r.value.map(|s| (s.0, m.clone())))
                .collect();
            expected.sort_by(|a, b| (a.0 + 0.0).total_cmp(&(b.0 + 0.0)).then(a.1.cmp(&b.1)));
            let got: Vec<(f64, Blob)> = z.iter().map(|(m, s)| (s, m.clone())).collect();
            prop_assert_eq!(got.len(), z.len());
            prop_assert_eq!(
                got.iter().map(|(s, m)| (s.to_bits(), m.clone())).collect::<Vec<_>>(),
                expected.iter().map(|(s, m)| (s.to_bits(), m.clone())).collect::<Vec<_>>()
            );
        }
    });
}
