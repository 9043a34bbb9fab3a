//! Lattice values for tests: one of every type, non-trivial (tombstoned OR-set members,
//! counters with decrements, nested maps, concurrent causal versions).

use lattice::{
    Bool, CausalVersion, CausalWriter, Counter, FieldReg, Hash, Lattice, Lww, Map, Max, Min,
    MultiKeyCausal, OrSet, OrderedSet, Priority, Score, Set, SingleKeyCausal, SortedSet, Timestamp,
    Value, VectorClock,
};

fn blob(s: &str) -> Box<[u8]> {
    s.as_bytes().into()
}

/// One value of every lattice type, in the order of [`Value`]'s variants.
pub fn one_of_each() -> Vec<Value> {
    let ts = Timestamp::new(5 << 16, 3);
    let mut orset: OrSet<Box<[u8]>> = OrSet::new();
    let _ = orset.add(1, blob("a"));
    let _ = orset.add(2, blob("b"));
    let _ = orset.remove(&b"a"[..]);
    let mut counter = Counter::new();
    counter.merge(counter.add_delta(9, -4).unwrap());
    counter.merge(counter.add_delta(8, 10).unwrap());
    let mut w1 = CausalWriter::new(1);
    let mut w2 = CausalWriter::new(2);
    let empty = VectorClock::new();
    let mut causal = SingleKeyCausal::new(w1.next_clock(&empty), blob("x"));
    causal.merge(SingleKeyCausal::new(w2.next_clock(&empty), blob("y")));
    let dep = (blob("other"), w1.next_clock(&empty));
    let multi = MultiKeyCausal::next_version(None, &mut w2, [dep], blob("z"));
    let mut multi2 = MultiKeyCausal::new(CausalVersion {
        clock: w1.next_clock(&empty),
        deps: Default::default(),
        value: blob("w"),
    });
    multi2.merge(multi);
    // ---- lists (helper B) ----
    let mut list = lattice::List::new();
    let _ = list.push_back(1, ts, blob("first"));
    let _ = list.push_back(2, ts, blob("gone"));
    let _ = list.push_front(1, ts, blob("zeroth"));
    if let Some(pos) = list.pos_at(2).cloned() {
        let _ = list.remove(&pos);
    }
    let mut inner: Map<Box<[u8]>, Value> = Map::new();
    inner.insert_merge(blob("n"), Value::Max(Max(2)));
    let mut map: Map<Box<[u8]>, Value> = Map::new();
    map.insert_merge(blob("nested"), Value::Map(inner));
    map.insert_merge(blob("flag"), Value::Bool(Bool(true)));
    vec![
        Value::Lww(Lww::new(ts, blob("hello"))),
        Value::Set([blob("p"), blob("q")].into_iter().collect::<Set<_>>()),
        Value::OrderedSet(
            [blob("b"), blob("a")]
                .into_iter()
                .collect::<OrderedSet<_>>(),
        ),
        Value::OrSet(Box::new(orset)),
        Value::Max(Max(i64::MIN)),
        Value::Min(Min(i64::MAX)),
        Value::Bool(Bool(false)),
        Value::Counter(counter),
        Value::Map(map),
        Value::Priority(Priority {
            priority: -1.5,
            value: blob("job"),
        }),
        Value::SingleKeyCausal(causal),
        Value::MultiKeyCausal(multi2),
        // ---- lists (helper B) ----
        Value::List(Box::new(list)),
        // Redis hashes and sorted sets: live entries and a removal each.
        Value::Hash(Box::new(Hash::from_entries([
            (blob("f1"), FieldReg::new(ts, Some(blob("v1")))),
            (blob("gone"), FieldReg::new(ts, None)),
        ]))),
        Value::SortedSet(Box::new(SortedSet::from_entries([
            (blob("m1"), FieldReg::new(ts, Some(Score(2.5)))),
            (
                blob("m2"),
                FieldReg::new(ts, Some(Score(f64::NEG_INFINITY))),
            ),
            (blob("gone"), FieldReg::new(ts, None)),
        ]))),
    ]
}
