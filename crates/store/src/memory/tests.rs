//! Tests of `memory`.

use super::*;
use lattice::{Counter, OrSet, Timestamp, Value};

fn ts(time: u64) -> Timestamp {
    Timestamp::new(time << 16, 1)
}

fn lww(time: u64, v: &[u8]) -> Record {
    Record::new(ts(time), Some(Value::Lww(Lww::new(ts(time), Box::from(v)))))
}

fn value(s: &MemStore, key: &[u8]) -> Option<Value> {
    s.get(key).and_then(|r| r.to_value())
}

#[test]
fn merge_tracks_liveness_and_bytes() {
    let mut s = MemStore::new();
    let o = s.merge(b"k", lww(1, b"a"));
    assert!(o.changed && !o.was_live && o.is_live);
    assert_eq!(s.live_keys(), 1);
    let b1 = s.bytes();
    assert!(b1 >= 1 + 1 + TS_BYTES);
    // An older write changes nothing.
    let o = s.merge(b"k", lww(0, b"zzzz"));
    assert!(!o.changed);
    assert_eq!(s.bytes(), b1);
    // A bigger newer value grows the accounting.
    s.merge(b"k", lww(2, &[7u8; 100]));
    assert!(s.bytes() >= b1 + 99);
    assert_eq!(value(&s, b"k"), lww(2, &[7u8; 100]).value);
    // A tombstone kills the key but keeps the entry.
    let o = s.merge(b"k", Record::tombstone(ts(3)));
    assert!(o.changed && o.was_live && !o.is_live);
    assert_eq!(s.live_keys(), 0);
    assert_eq!(s.len(), 1);
    assert!(s.get_live(b"k").is_none());
    assert_eq!(s.get(b"k").map(|r| r.epoch()), Some(ts(3)));
    // An older write does not resurrect it; a newer one does (and is packed again).
    assert!(!s.merge(b"k", lww(2, b"zz")).changed);
    let o = s.merge(b"k", lww(4, b"back"));
    assert!(o.changed && o.is_live);
    assert!(matches!(
        s.get(b"k"),
        Some(RecordRef::Lww { value: b"back", .. })
    ));
    s.merge(b"k", Record::tombstone(ts(5)));
    assert_eq!(s.collect_tombstones(2), 0);
    assert_eq!(s.collect_tombstones(6), 1);
    assert!(s.is_empty());
    assert_eq!(s.bytes(), 0);
}

#[test]
fn equal_timestamps_keep_the_larger_value_in_any_order() {
    let mut a = MemStore::new();
    let mut b = MemStore::new();
    a.merge(b"k", lww(1, b"x"));
    a.merge(b"k", lww(1, b"y"));
    b.merge(b"k", lww(1, b"y"));
    b.merge(b"k", lww(1, b"x"));
    assert_eq!(value(&a, b"k"), value(&b, b"k"));
    assert_eq!(value(&a, b"k"), lww(1, b"y").value);
}

#[test]
fn records_move_between_packed_and_full() {
    let mut s = MemStore::new();
    s.merge(b"k", lww(1, b"v"));
    // A counter at a newer epoch replaces the register (a new incarnation).
    let c = Counter::new().add_delta(1, 5).unwrap();
    let o = s.merge(b"k", Record::new(ts(2), Some(Value::Counter(c.clone()))));
    assert!(o.changed && o.was_live && o.is_live);
    assert_eq!(value(&s, b"k"), Some(Value::Counter(c)));
    assert_eq!(s.len(), 1);
    assert_eq!(s.live_keys(), 1);
    // And back.
    s.merge(b"k", lww(3, b"w"));
    assert!(matches!(
        s.get(b"k"),
        Some(RecordRef::Lww { value: b"w", .. })
    ));
    assert_eq!(s.len(), 1);
    let removed = s.remove(b"k").unwrap();
    assert_eq!(removed, lww(3, b"w"));
    assert_eq!((s.bytes(), s.live_keys()), (0, 0));
    // A register whose epoch is not its timestamp stays full, and reads the same.
    let odd = Record::new(
        ts(9),
        Some(Value::Lww(Lww::new(ts(1), Box::from(&b"x"[..])))),
    );
    s.merge(b"o", odd.clone());
    assert!(matches!(s.get(b"o"), Some(RecordRef::Full(_))));
    assert_eq!(s.get(b"o").map(|r| r.to_record()), Some(odd));
}

#[test]
fn partitions_cover_every_key_once_and_seeds_fix_the_order() {
    let mut a = MemStore::with_seed(7);
    let mut b = MemStore::with_seed(7);
    for i in 0..2000u32 {
        let k = format!("k{i}");
        a.merge(k.as_bytes(), lww(1, b"v"));
        b.merge(k.as_bytes(), lww(1, b"v"));
    }
    a.merge(b"t", Record::tombstone(ts(1)));
    b.merge(b"t", Record::tombstone(ts(1)));
    let mut seen = 0;
    for p in 0..PARTITIONS {
        let keys: Vec<&[u8]> = a.iter_partition(p).map(|(k, _)| k).collect();
        assert_eq!(keys.len(), a.partition_len(p));
        assert!(keys.iter().all(|k| partition_of(k) == p));
        seen += keys.len();
    }
    assert_eq!(seen, a.len());
    assert!((0..PARTITIONS).filter(|&p| a.partition_len(p) > 0).count() > 200);
    let order = |s: &MemStore| s.iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>();
    assert_eq!(order(&a), order(&b), "same seed, same order");
    assert!(!a.remove_tombstone(b"t", ts(2)), "another epoch");
    assert!(!a.remove_tombstone(b"k1", ts(1)), "not a tombstone");
    assert!(a.remove_tombstone(b"t", ts(1)));
    assert!(a.get(b"t").is_none());
}

#[test]
fn iter_sees_both_tables() {
    let mut s = MemStore::new();
    s.merge(b"a", lww(1, b"1"));
    s.merge(b"b", Record::tombstone(ts(1)));
    let mut keys: Vec<&[u8]> = s.iter().map(|(k, _)| k).collect();
    keys.sort();
    assert_eq!(keys, vec![&b"a"[..], &b"b"[..]]);
}

/// The size estimate of a growing collection stays within a small factor of the exact
/// size, while the exact count runs only now and then.
#[test]
fn collection_estimates_stay_close() {
    let mut s = MemStore::new();
    let mut set: OrSet<Box<[u8]>> = OrSet::new();
    let first = set.add(1, Box::from(&b"m0"[..]));
    s.merge(
        b"s",
        Record::new(Timestamp::ZERO, Some(Value::OrSet(Box::new(first)))),
    );
    for i in 1..5000u32 {
        let member: Box<[u8]> = format!("member-{i}").into_bytes().into();
        let grown = member.len() + 64;
        s.update(b"s", grown, |r| match &mut r.value {
            Some(Value::OrSet(set)) => set.add(1, member),
            _ => unreachable!("an OR-set was stored"),
        })
        .expect("key exists");
        if i % 250 != 0 {
            continue;
        }
        let Some(RecordRef::Full(record)) = s.get(b"s") else {
            panic!("full record expected")
        };
        let exact = exact_size(b"s", record);
        let estimate = s.size_of(b"s");
        assert!(
            estimate >= exact / 2 && estimate <= 3 * exact,
            "{estimate} vs {exact}"
        );
    }
    assert_eq!(s.bytes(), s.size_of(b"s"));
    assert_eq!(s.live_keys(), 1);
}

/// Reads and writes refresh an entry's age; the partial flag survives merges and
/// changes of form; sampling sees entries of both tables with their ages.
#[test]
fn ages_partial_flags_and_samples() {
    let mut s = MemStore::with_seed(3);
    s.merge(b"old", lww(1, b"v"));
    s.merge(b"set", Record::tombstone(ts(1)));
    for i in 0..100u32 {
        s.merge(format!("k{i}").as_bytes(), lww(1, b"v"));
    }
    let old = s.age(b"old").unwrap();
    assert!(old >= 100, "{old}");
    assert!(s.get_touched(b"old").is_some());
    assert_eq!(s.age(b"old"), Some(0));
    assert!(s.age(b"k0").unwrap() > 0);
    // Partial: kept by merges, in either form, until cleared.
    assert!(s.set_partial(b"old", true));
    s.merge(b"old", lww(2, b"w"));
    assert!(s.is_partial(b"old"));
    let c = lattice::Counter::new().add_delta(1, 5).unwrap();
    s.merge(b"old", Record::new(ts(3), Some(Value::Counter(c))));
    assert!(matches!(s.get(b"old"), Some(RecordRef::Full(_))));
    assert!(s.is_partial(b"old"));
    s.merge(b"old", lww(4, b"x"));
    assert!(matches!(s.get(b"old"), Some(RecordRef::Lww { .. })));
    assert!(s.is_partial(b"old"));
    assert!(s.set_partial(b"old", false));
    assert!(!s.is_partial(b"old"));
    assert!(!s.set_partial(b"absent", true));
    // A sample of every partition sees every entry once, with its age.
    let mut seen = 0;
    for p in 0..PARTITIONS {
        let before = seen;
        s.sample(p, 0, 1000, |k, info| {
            seen += 1;
            assert_eq!(Some(info.age), s.age(k));
            assert_eq!(info.partial, s.is_partial(k));
            true
        });
        assert_eq!(seen - before, s.partition_len(p));
    }
    assert_eq!(seen, s.len());
    // A bounded sample stops at `n`.
    let p = partition_of(b"k1");
    let mut n = 0;
    s.sample(p, 7, 1, |_, _| {
        n += 1;
        true
    });
    assert_eq!(n, 1);
}

#[test]
fn a_record_with_a_deadline_keeps_it() {
    // A packed LWW block has no room for a deadline: such a record is kept whole.
    let mut s = MemStore::new();
    let mut r = lww(1, b"v");
    r.expiry = Some(Box::new(lattice::Expiry::new(ts(1), Some(5_000))));
    s.merge(b"k", r.clone());
    assert_eq!(s.get(b"k").map(|r| r.to_record()), Some(r.clone()));
    // Setting the deadline again at the same epoch merges the registers.
    let mut later = Record::tombstone(ts(1));
    later.expiry = Some(Box::new(lattice::Expiry::new(ts(2), None)));
    assert!(s.merge(b"k", later).changed);
    let stored = s.get(b"k").map(|r| r.to_record()).unwrap();
    assert_eq!(stored.value, r.value);
    assert_eq!(stored.deadline_ms(), None);
    assert!(stored.expiry.is_some());
}

#[test]
fn a_deadline_set_on_a_packed_register_unpacks_it() {
    let mut s = MemStore::new();
    s.merge(b"k", lww(1, b"v"));
    let mut delta = Record::tombstone(ts(1));
    delta.expiry = Some(Box::new(lattice::Expiry::new(ts(2), Some(9))));
    assert!(s.merge(b"k", delta).changed);
    let stored = s.get(b"k").map(|r| r.to_record()).unwrap();
    assert_eq!(stored.value, lww(1, b"v").value);
    assert_eq!(stored.deadline_ms(), Some(9));
    // A newer write (a new incarnation) clears it, as Redis's SET does.
    s.merge(b"k", lww(3, b"w"));
    assert_eq!(s.get(b"k").map(|r| r.to_record().deadline_ms()), Some(None));
}

#[test]
fn prefetching_a_key_changes_nothing_the_store_can_observe() {
    let mut s = MemStore::with_seed(3);
    for i in 0..1000u32 {
        s.merge(format!("k{i}").as_bytes(), lww(1, b"v"));
    }
    s.merge(b"set", Record::tombstone(ts(2)));
    s.get_touched(b"k7");
    let (bytes, len, live) = (s.bytes(), s.len(), s.live_keys());
    let ages: Vec<_> = [&b"k7"[..], b"k8", b"set"]
        .iter()
        .map(|k| s.age(k))
        .collect();
    for key in [&b"k7"[..], b"k999", b"set", b"absent", b""] {
        s.prefetch(s.locate(key));
    }
    assert_eq!((s.bytes(), s.len(), s.live_keys()), (bytes, len, live));
    let after: Vec<_> = [&b"k7"[..], b"k8", b"set"]
        .iter()
        .map(|k| s.age(k))
        .collect();
    assert_eq!(after, ages, "a prefetch is not an access");
    assert_eq!(value(&s, b"k7"), lww(1, b"v").value);
    assert!(s.get(b"absent").is_none());
}

/// The block of `key` in its packed table (its address tells whether it was reallocated).
fn packed_block<'s>(s: &'s MemStore, key: &[u8]) -> &'s [u8] {
    let hash = s.hash(key);
    s.parts[partition_of(key)]
        .packed
        .find(hash, |b| packed_key(b) == key)
        .expect("a packed block")
}

#[test]
fn a_value_as_long_as_the_last_is_written_into_its_block() {
    let mut s = MemStore::new();
    s.merge(b"key", lww(1, b"first value"));
    let bytes = s.bytes();
    let at = packed_block(&s, b"key").as_ptr();
    let o = s.merge(b"key", lww(2, b"other value"));
    assert!(o.changed && o.was_present && o.is_live);
    assert_eq!(packed_block(&s, b"key").as_ptr(), at, "rewritten in place");
    assert_eq!(s.bytes(), bytes);
    assert!(matches!(
        s.get(b"key"),
        Some(RecordRef::Lww { ts: t, value: b"other value" }) if t == ts(2)
    ));
    // The block is what packing the record afresh gives, meta word aside.
    let fresh = pack(0, b"key", ts(2), b"other value");
    assert_eq!(packed_block(&s, b"key")[META_BYTES..], fresh[META_BYTES..]);
    // An older write of the same length changes nothing.
    assert!(!s.merge(b"key", lww(1, b"zzzzzzzzzzz")).changed);
    assert_eq!(value(&s, b"key"), lww(2, b"other value").value);
    // A longer or shorter value gets a block of its own size.
    s.merge(b"key", lww(3, b"a longer value"));
    assert_eq!(value(&s, b"key"), lww(3, b"a longer value").value);
    s.merge(b"key", lww(4, b"short"));
    assert_eq!(value(&s, b"key"), lww(4, b"short").value);
    assert_eq!(packed_block(&s, b"key").len(), fresh.len() - 6);
    // A change in place clears the synced flag as a new block does.
    assert!(s.set_synced(b"key"));
    s.merge(b"key", lww(5, b"newer"));
    assert!(!s.is_synced(b"key"));
    assert_eq!(value(&s, b"key"), lww(5, b"newer").value);
}

#[test]
fn the_change_count_moves_with_every_change_and_only_then() {
    let mut s = MemStore::new();
    let mut last = s.changes();
    let mut moved = |s: &MemStore| {
        let now = s.changes();
        let did = now != last;
        last = now;
        did
    };
    s.merge(b"k", lww(2, b"v"));
    assert!(moved(&s), "an insert");
    s.merge(b"k", lww(1, b"old"));
    assert!(!moved(&s), "a merge that changes nothing");
    s.merge(b"k", lww(3, b"w"));
    assert!(moved(&s), "an overwrite in place");
    let _ = s.get(b"k");
    s.touch(b"k");
    assert!(!moved(&s), "reads and touches");
    s.merge(
        b"set",
        Record::new(ts(1), Some(Value::OrSet(Box::default()))),
    );
    assert!(moved(&s));
    assert!(s.update(b"set", 0, |_| ()).is_some());
    assert!(moved(&s), "an update in place");
    assert!(s.update(b"absent", 0, |_| ()).is_none());
    assert!(!moved(&s));
    assert!(s.remove(b"k").is_some());
    assert!(moved(&s), "a removal");
    assert!(s.remove(b"k").is_none());
    assert!(!moved(&s));
    s.merge(b"gone", Record::new(ts(5), None));
    assert!(moved(&s), "a tombstone");
    assert_eq!(s.collect_tombstones(0), 0);
    assert!(!moved(&s));
    assert_eq!(s.collect_tombstones(u64::MAX), 1);
    assert!(moved(&s), "tombstones collected");
}
