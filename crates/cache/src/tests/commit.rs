//! The sink's commit: checklist items 5–9, the bounded latest table and its rotation.

use std::collections::BTreeMap;

use super::k;
use super::world::{fill, run_staging, write, Store};
use crate::checker::{check, ReadMeta};
use crate::versionset::refs_of;
use crate::{CacheId, Cut, Error, Executor, Key, MultiKeyCausal, Staging};

fn payloads(v: &MultiKeyCausal) -> Vec<&[u8]> {
    v.values().map(|b| &b[..]).collect()
}

/// Checklist 5 (I1): the new clock strictly dominates the version read, even when the read
/// came from a replica that has not seen the executor's own last write.
#[test]
fn a_write_dominates_what_it_read() {
    let mut store = Store::default();
    let mut e = Executor::new(7, 8);
    let first = write(&mut store, &mut e, &[], &[("a", "a1")]);
    let second = write(&mut store, &mut e, &["a"], &[("a", "a2")]);
    assert!(second[0].1.clock().dominates(&first[0].1.clock()));
    // A stale read (the empty a) still gets a fresh counter: no clock is reused.
    let stale: BTreeMap<Key, MultiKeyCausal> = [(k("b"), MultiKeyCausal::default())].into();
    let third = e
        .commit(
            [(k("a"), Key::from(&b"a3"[..]))].into(),
            &refs_of(&stale, CacheId(1)),
            &stale,
        )
        .unwrap();
    assert_ne!(third[0].1.clock(), second[0].1.clock());
    assert_eq!(third[0].1.clock().get(e.actor()), 3);
}

/// Checklist 6 (I2): the new version depends on the read set (not on itself) and inherits
/// the dependencies of the version it overwrites.
#[test]
fn dependencies_come_from_the_reads_and_are_inherited() {
    let mut store = Store::default();
    let (mut e1, mut e2, mut e3) = (
        Executor::new(1, 8),
        Executor::new(2, 8),
        Executor::new(3, 8),
    );
    let a1 = write(&mut store, &mut e1, &[], &[("a", "a1")]);
    let b1 = write(&mut store, &mut e2, &["a", "b"], &[("b", "b1")]);
    assert_eq!(
        b1[0].1.deps().keys().cloned().collect::<Vec<_>>(),
        vec![k("a")]
    );
    let b2 = write(&mut store, &mut e3, &["b", "c"], &[("b", "b2")]);
    assert_eq!(
        b2[0].1.deps()[&k("a")],
        a1[0].1.clock(),
        "inherited from b1"
    );
    assert!(!b2[0].1.deps().contains_key(&k("b")));
    assert!(
        !b2[0].1.deps().contains_key(&k("c")),
        "c was read as absent"
    );
    // A written key that was read needs its full read version.
    let refs = refs_of(&[(k("b"), store.latest(b"b").unwrap())].into(), CacheId(1));
    assert_eq!(
        e3.commit(
            [(k("b"), Key::from(&b"x"[..]))].into(),
            &refs,
            &BTreeMap::new()
        ),
        Err(Error::MissingReadVersion { key: k("b") })
    );
}

/// Checklist 7: a DAG's writes depend on each other, so a reader never sees the new a with
/// the old b: pushing only the new a drags the new b into the cut; a torn read is caught.
#[test]
fn writes_of_one_commit_are_visible_together() {
    let mut store = Store::default();
    let mut e = Executor::new(1, 8);
    write(&mut store, &mut e, &[], &[("a", "a0"), ("b", "b0")]);
    let mut cut = Cut::new(1 << 20);
    fill(&mut cut, &["a", "b"], &store);
    let old_b = cut.get(b"b").unwrap().clone();
    let new = write(
        &mut store,
        &mut Executor::new(2, 8),
        &["a", "b"],
        &[("a", "a1"), ("b", "b1")],
    );
    assert_eq!(new[0].1.deps()[&k("b")], new[1].1.clock());
    assert_eq!(new[1].1.deps()[&k("a")], new[0].1.clock());
    let s = Staging::for_pushed([new[0].clone()], &cut).unwrap();
    run_staging(&mut cut, s, &store, |_, _| 0).unwrap();
    assert_eq!(cut.get(b"b").unwrap().clock(), new[1].1.clock());
    let torn: BTreeMap<Key, ReadMeta> = [
        (k("a"), ReadMeta::of(&new[0].1)),
        (k("b"), ReadMeta::of(&old_b)),
    ]
    .into();
    let report = check(&torn);
    assert_eq!(report.atomic.len(), 1);
    assert_eq!(report.strict.len(), 1);
}

/// Checklist 8 (P:143–145): two DAGs on the same executor write the same key without
/// observing each other; both payloads survive as siblings. Without the latest merge the
/// second write's larger counter clobbers the first.
#[test]
fn the_latest_merge_keeps_concurrent_writes_of_one_executor() {
    fn run(mut e: Executor) -> MultiKeyCausal {
        let mut store = Store::default();
        write(&mut store, &mut Executor::new(9, 8), &[], &[("k", "k0")]);
        let k0: BTreeMap<Key, MultiKeyCausal> = [(k("k"), store.latest(b"k").unwrap())].into();
        let refs = refs_of(&k0, CacheId(1));
        // Both DAGs read k0 and neither sees the other's write.
        let one = e
            .commit([(k("k"), Key::from(&b"one"[..]))].into(), &refs, &k0)
            .unwrap();
        let two = e
            .commit([(k("k"), Key::from(&b"two"[..]))].into(), &refs, &k0)
            .unwrap();
        store.put_all(&one);
        store.put_all(&two);
        store.latest(b"k").unwrap()
    }
    let safe = run(Executor::new(1, 8));
    assert_eq!(payloads(&safe), vec![&b"one"[..], &b"two"[..]]);
    let unsafe_variant = run(Executor::new(1, 8).without_latest_merge());
    assert_eq!(
        payloads(&unsafe_variant),
        vec![&b"two"[..]],
        "one was clobbered"
    );
}

/// Checklist 9 (P:151): a failed put is retried with the same versions; the store ends up
/// as if it was put once.
#[test]
fn a_retried_put_changes_nothing() {
    let mut store = Store::default();
    let mut e = Executor::new(1, 8);
    let out = write(&mut store, &mut e, &[], &[("a", "a1"), ("b", "b1")]);
    let depth = store.depth(b"a");
    let before = store.latest(b"a");
    store.put_all(&out);
    store.put_all(&out);
    assert_eq!(store.depth(b"a"), depth);
    assert_eq!(store.latest(b"a"), before);
    assert_eq!(payloads(&store.latest(b"a").unwrap()).len(), 1);
}

/// The latest table is bounded: past it the executor rotates to a fresh id, and a write of
/// the fresh id does not clobber an old write it did not read.
#[test]
fn rotation_bounds_the_table_without_clobbering() {
    let mut store = Store::default();
    let mut e = Executor::new(1, 2);
    let old = e.actor();
    let refs = BTreeMap::new();
    let blob = |s: &str| Key::from(s.as_bytes());
    let k1 = e
        .commit([(k("x"), blob("x1"))].into(), &Default::default(), &refs)
        .unwrap();
    store.put_all(&k1);
    e.commit([(k("y"), blob("y1"))].into(), &Default::default(), &refs)
        .unwrap();
    assert_eq!(e.latest_len(), 2);
    e.commit([(k("z"), blob("z1"))].into(), &Default::default(), &refs)
        .unwrap();
    assert_eq!((e.epoch(), e.latest_len()), (1, 1));
    assert_ne!(e.actor(), old);
    // x written again by the fresh id without reading x1: concurrent, both survive.
    let x2 = e
        .commit([(k("x"), blob("x2"))].into(), &Default::default(), &refs)
        .unwrap();
    store.put_all(&x2);
    assert_eq!(
        payloads(&store.latest(b"x").unwrap()),
        vec![&b"x1"[..], &b"x2"[..]]
    );
    // The last epoch cannot rotate.
    let mut last = Executor::new(5, 1).at_epoch(u32::MAX);
    last.commit([(k("p"), blob("p"))].into(), &Default::default(), &refs)
        .unwrap();
    assert_eq!(
        last.commit([(k("q"), blob("q"))].into(), &Default::default(), &refs),
        Err(Error::EpochsExhausted { base: 5 })
    );
    assert!(e
        .commit(BTreeMap::new(), &Default::default(), &refs)
        .unwrap()
        .is_empty());
}
