//! Dependency-metadata GC: the pruning rule, a round's meet and closure, the cut and the
//! staging under a `Stable`, the writer's pruning, and a hot key whose dependency list
//! stays bounded with GC and grows without it.

use std::collections::BTreeMap;

use super::{k, vc, ver};
use crate::gc::{meet, Holdings, Round, Stable};
use crate::versionset::refs_of;
use crate::{CacheId, Cut, Executor, Key, MultiKeyCausal, PinLimits, Pins, ReqId, Staging, Step};

fn stable(entries: &[(&str, &[(u64, u64)])]) -> Stable {
    entries.iter().map(|(key, c)| (k(key), vc(c))).collect()
}

#[test]
fn meet_is_the_entry_wise_minimum() {
    assert_eq!(
        meet(&vc(&[(1, 3), (2, 1)]), &vc(&[(1, 2), (3, 4)])),
        vc(&[(1, 2)])
    );
    assert_eq!(meet(&vc(&[(1, 3)]), &vc(&[])), vc(&[]));
}

/// ⟨a, VC⟩ goes once `VC ≤ Stable(a)`; a concurrent or newer one stays; empty clocks go.
#[test]
fn prune_drops_exactly_the_covered_dependencies() {
    let s = stable(&[("a", &[(1, 2)]), ("b", &[(2, 1)])]);
    let v = ver(
        vc(&[(9, 1)]),
        &[
            ("a", vc(&[(1, 1)])),
            ("b", vc(&[(2, 1), (3, 1)])),
            ("c", vc(&[(4, 1)])),
            ("d", vc(&[])),
        ],
        "x",
    );
    assert!(s.prunes(&v));
    let p = s.prune(&v);
    assert_eq!(p.clock(), v.clock());
    assert_eq!(
        p.deps().into_keys().collect::<Vec<_>>(),
        vec![k("b"), k("c")]
    );
    assert!(!s.prunes(&p));
    assert_eq!(s.prune(&p), p);
    // The same version pruned with an older Stable and a newer one collapses into one.
    let mut both = s.prune(&v);
    lattice::Lattice::merge(&mut both, Stable::new().prune(&v));
    assert_eq!(both.versions().len(), 2);
    assert_eq!(s.prune(&both).versions().len(), 1);
}

/// A round takes the meet of the replicas and of every reported copy, never goes below the
/// previous `Stable`, and leaves keys nobody sampled where they were.
#[test]
fn a_round_meets_replicas_and_holders() {
    let prev = stable(&[("z", &[(7, 1)])]);
    let mut r = Round::new(&prev);
    r.sample(b"a", &ver(vc(&[(1, 5)]), &[], "a5"));
    r.sample(b"a", &ver(vc(&[(1, 4)]), &[], "a4")); // a lagging replica
    r.sample(b"b", &ver(vc(&[(2, 3)]), &[], "b3"));
    let mut cache = Holdings::new();
    cache.hold(b"a", &vc(&[(1, 3)]));
    cache.hold(b"a", &vc(&[(1, 5)])); // a pin and the cut: the meet counts
    r.report(&cache);
    let out = r.finish();
    assert_eq!(out.get(b"a"), Some(&vc(&[(1, 3)])));
    assert_eq!(out.get(b"b"), Some(&vc(&[(2, 3)])));
    assert_eq!(out.get(b"z"), Some(&vc(&[(7, 1)])));
    // A cache holding a as absent keeps a's Stable empty.
    let mut r = Round::new(&Stable::new());
    r.sample(b"a", &ver(vc(&[(1, 5)]), &[], "a5"));
    r.report(&[(k("a"), vc(&[]))].into_iter().collect());
    assert_eq!(r.finish().get(b"a"), None);
}

/// Closure: c may only become stable at a clock whose dependencies are stable too. Here a
/// cache holds an old a, so a is stable only at a1 while c2 depends on a2: c stays where
/// it was, and b's dependency on c2 is kept (dropping it would let a reader of b hold
/// a1, which happened before a2 → c2 → b).
#[test]
fn a_round_keeps_stable_closed() {
    let mut r = Round::new(&Stable::new());
    r.sample(b"a", &ver(vc(&[(1, 2)]), &[], "a2"));
    r.sample(b"c", &ver(vc(&[(3, 2)]), &[("a", vc(&[(1, 2)]))], "c2"));
    r.report(&[(k("a"), vc(&[(1, 1)]))].into_iter().collect());
    let out = r.finish();
    assert_eq!(out.get(b"a"), Some(&vc(&[(1, 1)])));
    assert_eq!(out.get(b"c"), None);
    assert!(!out.covers(b"c", &vc(&[(3, 2)])));
    // Once the cache moved past a2, both are stable.
    let mut r = Round::new(&out);
    r.sample(b"a", &ver(vc(&[(1, 2)]), &[], "a2"));
    r.sample(b"c", &ver(vc(&[(3, 2)]), &[("a", vc(&[(1, 2)]))], "c2"));
    r.report(&[(k("a"), vc(&[(1, 2)]))].into_iter().collect());
    let out = r.finish();
    assert!(out.covers(b"c", &vc(&[(3, 2)])));
    // Mutual dependencies of one commit do not block each other.
    let mut r = Round::new(&Stable::new());
    r.sample(b"x", &ver(vc(&[(5, 1)]), &[("y", vc(&[(5, 1)]))], "x"));
    r.sample(b"y", &ver(vc(&[(5, 1)]), &[("x", vc(&[(5, 1)]))], "y"));
    let out = r.finish();
    assert!(out.covers(b"x", &vc(&[(5, 1)])) && out.covers(b"y", &vc(&[(5, 1)])));
}

/// The cut prunes what it holds when it learns a `Stable`, stays a cut with its index and
/// bytes in step, and reports its holdings; pins report theirs.
#[test]
fn the_cut_and_pins_under_a_stable() {
    let mut cut = Cut::new(1 << 20);
    let mut s = Staging::for_pushed(
        [
            (k("a"), ver(vc(&[(1, 1)]), &[], "a1")),
            (k("b"), ver(vc(&[(2, 1)]), &[("a", vc(&[(1, 1)]))], "b1")),
        ],
        &cut,
    )
    .unwrap();
    assert_eq!(s.step(&cut), Step::Ready);
    cut.merge_staging(&mut s).unwrap();
    let before = cut.bytes();
    assert_eq!(cut.dependents(b"a").len(), 1);
    assert_eq!(cut.advance_stable(&stable(&[("a", &[(1, 1)])])), 1);
    assert_eq!(cut.advance_stable(&stable(&[("a", &[(1, 1)])])), 0);
    cut.check().unwrap();
    assert!(cut.bytes() < before);
    assert!(
        cut.dependents(b"a").is_empty(),
        "evicting a no longer drags b"
    );
    assert!(cut.get(b"b").unwrap().deps().is_empty());
    let h = cut.holdings();
    assert_eq!(h.get(b"b"), Some(&vc(&[(2, 1)])));
    let mut pins = Pins::new(PinLimits::default());
    pins.pin(ReqId(1), 10, [(k("a"), ver(vc(&[(1, 3)]), &[], "a3"))])
        .unwrap();
    pins.pin(ReqId(2), 10, [(k("a"), ver(vc(&[(1, 2)]), &[], "a2"))])
        .unwrap();
    assert_eq!(pins.holdings().get(b"a"), Some(&vc(&[(1, 2)])));
}

/// A pushed version whose dependency is covered merges without fetching it; one that is
/// not covered still waits for it.
#[test]
fn staging_skips_covered_dependencies() {
    let mut cut = Cut::new(1 << 20);
    cut.advance_stable(&stable(&[("a", &[(1, 1)])]));
    let b = ver(vc(&[(2, 1)]), &[("a", vc(&[(1, 1)]))], "b1");
    let mut s = Staging::for_pushed([(k("b"), b)], &cut).unwrap();
    assert_eq!(s.step(&cut), Step::Ready);
    cut.merge_staging(&mut s).unwrap();
    assert!(!cut.contains(b"a"));
    assert!(cut.get(b"b").unwrap().deps().is_empty());
    cut.check().unwrap();
    let c = ver(vc(&[(3, 1)]), &[("a", vc(&[(1, 2)]))], "c1");
    let mut s = Staging::for_pushed([(k("c"), c)], &cut).unwrap();
    assert!(matches!(s.step(&cut), Step::Fetch(f) if f[0].key == k("a")));
}

/// One commit: the read of a stable key is not recorded, the rest is.
#[test]
fn the_writer_prunes_at_commit() {
    let mut e = Executor::new(1, 16);
    let reads: BTreeMap<Key, MultiKeyCausal> = [
        (k("a"), ver(vc(&[(5, 1)]), &[], "a")),
        (k("b"), ver(vc(&[(6, 1)]), &[], "b")),
    ]
    .into();
    let out = e
        .commit_pruned(
            [(k("w"), Key::from(&b"w"[..]))].into(),
            &refs_of(&reads, CacheId(0)),
            &reads,
            &stable(&[("a", &[(5, 1)])]),
        )
        .unwrap();
    assert_eq!(
        out[0].1.deps().into_keys().collect::<Vec<_>>(),
        vec![k("b")]
    );
}

/// A hot key rewritten by requests that each read it and two of 40 other keys: without GC
/// its dependency list accumulates every key any writer read; with a round after every
/// commit (here every other key is held at its one version by everyone) it stays at what
/// the last commit read.
#[test]
fn a_hot_key_stays_bounded_with_gc_and_grows_without() {
    let others: Vec<(Key, MultiKeyCausal)> = (0..40u64)
        .map(|i| (k(&format!("k{i}")), ver(vc(&[(100 + i, 1)]), &[], "v")))
        .collect();
    let run = |gc: bool| -> Vec<usize> {
        let mut e = Executor::new(1, 64);
        let mut hot = MultiKeyCausal::default();
        let mut stable = Stable::new();
        let mut sizes = Vec::new();
        for i in 0..200usize {
            let mut reads: BTreeMap<Key, MultiKeyCausal> = BTreeMap::new();
            reads.insert(k("hot"), hot.clone());
            for j in [i * 7 % 40, (i * 13 + 5) % 40] {
                reads.insert(others[j].0.clone(), others[j].1.clone());
            }
            let out = e
                .commit_pruned(
                    [(k("hot"), Key::from(&b"h"[..]))].into(),
                    &refs_of(&reads, CacheId(0)),
                    &reads,
                    &stable,
                )
                .unwrap();
            hot = out[0].1.clone();
            sizes.push(hot.deps().len());
            if gc {
                let mut r = Round::new(&stable);
                for (key, v) in &others {
                    r.sample(key, v);
                }
                r.sample(b"hot", &hot);
                stable = r.finish();
            }
        }
        sizes
    };
    let without = run(false);
    let with = run(true);
    assert_eq!(
        *without.last().unwrap(),
        40,
        "every key ever read: {without:?}"
    );
    assert!(with.iter().all(|&n| n <= 2), "{with:?}");
}

/// The report rule: a cache reports only once the fetches it began before the sample have
/// ended. Here its staging got a1 from a lagging replica, then the store is sampled at a2.
/// Reported before the staging merges, the round sees nobody hold a and makes a2 stable;
/// the staging then merges a1, and b (which depends on a2) merges beside it without a
/// fetch of a: a1 → a2 → b, read together. Reported after, a1 is held, a stays at a1 and
/// b's dependency is fetched.
#[test]
fn a_report_before_a_fetch_lands_is_too_high() {
    let a1 = ver(vc(&[(1, 1)]), &[], "a1");
    let a2 = ver(vc(&[(1, 2)]), &[], "a2");
    let b = ver(vc(&[(2, 1)]), &[("a", vc(&[(1, 2)]))], "b");
    for report_late in [false, true] {
        let mut cut = Cut::new(1 << 20);
        let mut s = Staging::for_keys([k("a")], &cut);
        assert!(matches!(s.step(&cut), Step::Fetch(_)));
        s.accept(k("a"), Some(a1.clone())).unwrap();
        let mut round = Round::new(&Stable::new());
        round.sample(b"a", &a2);
        round.sample(b"b", &b);
        if !report_late {
            round.report(&cut.holdings());
        }
        assert_eq!(s.step(&cut), Step::Ready);
        cut.merge_staging(&mut s).unwrap();
        if report_late {
            round.report(&cut.holdings());
        }
        cut.advance_stable(&round.finish());
        let mut push = Staging::for_pushed([(k("b"), b.clone())], &cut).unwrap();
        let fetches_a = matches!(push.step(&cut), Step::Fetch(f) if f[0].key == k("a"));
        assert_eq!(fetches_a, report_late, "report late: {report_late}");
    }
}
