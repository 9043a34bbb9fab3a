//! Staging: recursive dependency resolution, retries on lagging replicas, cycles, keys that
//! do not exist, pushed versions, capacity, and a cut that changes between steps.

use super::world::{fill, run_staging, write, Store};
use super::{k, vc, ver};
use crate::{Cut, Error, Executor, Fetch, Staging, Step};

fn fetch(key: &str, attempt: u32) -> Fetch {
    Fetch {
        key: k(key),
        attempt,
    }
}

/// Checklist 11: a miss on c fetches c, then what c depends on, recursively; nothing is
/// visible before the one merge.
#[test]
fn a_miss_fetches_dependencies_recursively_and_merges_once() {
    let mut store = Store::default();
    let a1 = ver(vc(&[(1, 1)]), &[], "a1");
    let b1 = ver(vc(&[(2, 1)]), &[("a", vc(&[(1, 1)]))], "b1");
    let c1 = ver(vc(&[(3, 1)]), &[("b", vc(&[(2, 1)]))], "c1");
    store.put(&k("a"), &a1);
    store.put(&k("b"), &b1);
    store.put(&k("c"), &c1);
    let mut cut = Cut::new(1 << 20);
    let mut s = Staging::for_keys([k("c")], &cut);
    assert_eq!(s.step(&cut), Step::Fetch(vec![fetch("c", 0)]));
    assert_eq!(s.step(&cut), Step::Wait);
    s.accept(k("c"), store.latest(b"c")).unwrap();
    assert_eq!(s.step(&cut), Step::Fetch(vec![fetch("b", 0)]));
    s.accept(k("b"), store.latest(b"b")).unwrap();
    assert_eq!(s.step(&cut), Step::Fetch(vec![fetch("a", 0)]));
    assert!(cut.is_empty(), "nothing is visible while staging");
    assert_eq!(
        cut.merge_staging(&mut s),
        Err(Error::NotReady { unresolved: 1 })
    );
    s.accept(k("a"), store.latest(b"a")).unwrap();
    assert_eq!(s.step(&cut), Step::Ready);
    let merged = cut.merge_staging(&mut s).unwrap();
    assert_eq!(merged.added, vec![k("a"), k("b"), k("c")]);
    assert_eq!(cut.get(b"c"), Some(&c1));
    cut.check().unwrap();
    assert_eq!(cut.merge_staging(&mut s), Err(Error::AlreadyMerged));
    assert!(s.is_merged());
}

/// Checklist 11: a replica answering an old version does not satisfy the dependency; the
/// key is asked again, with the attempt counted.
#[test]
fn a_lagging_answer_is_asked_again() {
    let mut store = Store::default();
    store.put(&k("a"), &ver(vc(&[(1, 1)]), &[], "a1"));
    store.put(&k("a"), &ver(vc(&[(1, 2)]), &[], "a2"));
    store.put(&k("b"), &ver(vc(&[(2, 1)]), &[("a", vc(&[(1, 2)]))], "b"));
    let mut cut = Cut::new(1 << 20);
    let s = Staging::for_keys([k("b")], &cut);
    let mut seen = Vec::new();
    // The first answer for a comes from a replica one put behind.
    run_staging(&mut cut, s, &store, |key, attempt| {
        seen.push((key.clone(), attempt));
        usize::from(&key[..] == b"a" && attempt == 0)
    })
    .unwrap();
    assert_eq!(seen, vec![(k("b"), 0), (k("a"), 0), (k("a"), 1)]);
    assert_eq!(cut.get(b"a").unwrap().clock(), vc(&[(1, 2)]));
    cut.check().unwrap();
}

/// Checklist 11: mutually dependent writes (one commit) close as soon as both are staged.
#[test]
fn cycles_terminate() {
    let mut store = Store::default();
    let mut e = Executor::new(1, 16);
    write(&mut store, &mut e, &[], &[("a", "a1"), ("b", "b1")]);
    let mut cut = Cut::new(1 << 20);
    let mut s = Staging::for_keys([k("a")], &cut);
    let mut steps = 0;
    loop {
        steps += 1;
        match s.step(&cut) {
            Step::Fetch(fs) => {
                for f in fs {
                    s.accept(f.key.clone(), store.latest(&f.key)).unwrap();
                }
            }
            Step::Wait => unreachable!(),
            Step::Ready => break,
        }
    }
    assert_eq!(steps, 3);
    cut.merge_staging(&mut s).unwrap();
    assert_eq!(cut.len(), 2);
    cut.check().unwrap();
}

/// A requested key the store does not have is cached as the bottom (so the shell can
/// subscribe to it); a *dependency* the store does not have yet stays unresolved.
#[test]
fn keys_that_do_not_exist() {
    let mut store = Store::default();
    let mut cut = Cut::new(1 << 20);
    let merged = fill(&mut cut, &["nope"], &store);
    assert_eq!(merged.added, vec![k("nope")]);
    assert!(cut.get(b"nope").unwrap().is_empty());
    assert_eq!(cut.keys().cloned().collect::<Vec<_>>(), vec![k("nope")]);

    // b's dependency on a has not landed in the store yet (the writer's puts are in flight).
    store.put(&k("b"), &ver(vc(&[(2, 1)]), &[("a", vc(&[(1, 1)]))], "b"));
    let mut s = Staging::for_keys([k("b")], &cut);
    let Step::Fetch(_) = s.step(&cut) else {
        panic!()
    };
    s.accept(k("b"), store.latest(b"b")).unwrap();
    for attempt in 0..3 {
        assert_eq!(s.step(&cut), Step::Fetch(vec![fetch("a", attempt)]));
        s.accept(k("a"), store.latest(b"a")).unwrap();
    }
    assert_eq!(s.attempts(b"a"), 3);
    store.put(&k("a"), &ver(vc(&[(1, 1)]), &[], "a"));
    assert_eq!(s.step(&cut), Step::Fetch(vec![fetch("a", 3)]));
    s.accept(k("a"), store.latest(b"a")).unwrap();
    assert_eq!(s.step(&cut), Step::Ready);
    cut.merge_staging(&mut s).unwrap();
    cut.check().unwrap();
    // A later version replaces the cached bottom.
    store.put(&k("nope"), &ver(vc(&[(3, 1)]), &[], "now"));
    let merged = fill(&mut cut, &["nope"], &store);
    assert_eq!(merged.updated, vec![k("nope")]);
}

/// Refresh (P:127): pushed versions go through the same closure; a pushed version the cut
/// already dominates needs nothing.
#[test]
fn pushed_versions_are_closed_the_same_way() {
    let mut store = Store::default();
    store.put(&k("a"), &ver(vc(&[(1, 1)]), &[], "a1"));
    store.put(&k("b"), &ver(vc(&[(2, 1)]), &[("a", vc(&[(1, 1)]))], "b1"));
    let mut cut = Cut::new(1 << 20);
    fill(&mut cut, &["b"], &store);
    store.put(&k("a"), &ver(vc(&[(1, 2)]), &[], "a2"));
    let b2 = ver(vc(&[(2, 2)]), &[("a", vc(&[(1, 2)]))], "b2");
    store.put(&k("b"), &b2);
    let mut s = Staging::for_pushed([(k("b"), b2.clone())], &cut).unwrap();
    assert_eq!(s.step(&cut), Step::Fetch(vec![fetch("a", 0)]));
    s.accept(k("a"), store.latest(b"a")).unwrap();
    assert_eq!(s.step(&cut), Step::Ready);
    let merged = cut.merge_staging(&mut s).unwrap();
    assert_eq!(merged.updated, vec![k("a"), k("b")]);
    cut.check().unwrap();

    // An old push whose dependency is unknown: the cut dominates it, nothing to fetch.
    let old = ver(vc(&[(2, 1)]), &[("zz", vc(&[(7, 7)]))], "b1");
    let mut s = Staging::for_pushed([(k("b"), old)], &cut).unwrap();
    assert_eq!(s.step(&cut), Step::Ready);
    assert_eq!(
        cut.merge_staging(&mut s).unwrap().updated,
        Vec::<crate::Key>::new()
    );
}

/// A batch that alone exceeds the capacity is refused while staging.
#[test]
fn a_batch_larger_than_the_cut_is_refused_early() {
    let mut store = Store::default();
    store.put(&k("big"), &ver(vc(&[(1, 1)]), &[], &"x".repeat(500)));
    let cut = Cut::new(200);
    let mut s = Staging::for_keys([k("big")], &cut);
    let _ = s.step(&cut);
    assert!(matches!(
        s.accept(k("big"), store.latest(b"big")),
        Err(Error::WouldExceedCapacity { capacity: 200, .. })
    ));
    let pushed = Staging::for_pushed([(k("big"), store.latest(b"big").unwrap())], &cut);
    assert!(pushed.is_err());
}

/// A dependency the cut loses to an eviction between the last step and the merge is
/// fetched again instead of breaking the cut.
#[test]
fn an_eviction_between_steps_reopens_the_staging() {
    let mut store = Store::default();
    store.put(&k("a"), &ver(vc(&[(1, 1)]), &[], "a1"));
    store.put(&k("b"), &ver(vc(&[(2, 1)]), &[("a", vc(&[(1, 1)]))], "b1"));
    let mut cut = Cut::new(1 << 20);
    fill(&mut cut, &["a"], &store);
    let mut s = Staging::for_keys([k("b")], &cut);
    let _ = s.step(&cut);
    s.accept(k("b"), store.latest(b"b")).unwrap();
    assert_eq!(s.step(&cut), Step::Ready);
    assert_eq!(cut.evict(b"a"), vec![k("a")]);
    assert_eq!(
        cut.merge_staging(&mut s),
        Err(Error::NotReady { unresolved: 1 })
    );
    assert_eq!(s.step(&cut), Step::Fetch(vec![fetch("a", 0)]));
    s.accept(k("a"), store.latest(b"a")).unwrap();
    cut.merge_staging(&mut s).unwrap();
    cut.check().unwrap();
    assert_eq!(cut.len(), 2);
}
