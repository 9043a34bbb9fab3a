//! Versionsets: the union rule (Def. 7), supersession and the KOC check (Def. 6).

use std::collections::{BTreeMap, BTreeSet};

use super::{k, ks, vc};
use crate::versionset::{
    contained_in, fetches_by_source, koc_violations, restrict, supersedes, union, KocViolation,
};
use crate::{CacheId, VectorClock, VersionRef, VersionSet};

fn r(clock: VectorClock, sources: &[u64]) -> VersionRef {
    VersionRef {
        clock,
        sources: sources.iter().map(|&s| CacheId(s)).collect(),
    }
}

#[test]
fn join_keeps_the_superseding_sources_and_unions_the_rest() {
    // Strictly newer on one side: its sources alone merge to the joined clock.
    let mut a = r(vc(&[(1, 1)]), &[1]);
    a.join(&r(vc(&[(1, 2)]), &[2]));
    assert_eq!(a, r(vc(&[(1, 2)]), &[2]));
    a.join(&r(vc(&[(1, 1)]), &[3]));
    assert_eq!(a, r(vc(&[(1, 2)]), &[2]));
    // Equal: either side has it; keep both.
    a.join(&r(vc(&[(1, 2)]), &[4]));
    assert_eq!(a, r(vc(&[(1, 2)]), &[2, 4]));
    // Concurrent: the join needs both sides' pins.
    a.join(&r(vc(&[(2, 1)]), &[5]));
    assert_eq!(a, r(vc(&[(1, 2), (2, 1)]), &[2, 4, 5]));
    // The bottom changes nothing, and a bottom has no source.
    a.join(&VersionRef::bottom());
    assert_eq!(a.sources.len(), 3);
    assert!(VersionRef::new(VectorClock::new(), CacheId(9))
        .sources
        .is_empty());
    assert!(VersionRef::bottom().is_bottom());
}

#[test]
fn union_is_def_7() {
    let a: VersionSet = [
        (k("a"), r(vc(&[(1, 1)]), &[1])),
        (k("b"), r(vc(&[(2, 1)]), &[1])),
    ]
    .into();
    let b: VersionSet = [
        (k("b"), r(vc(&[(3, 1)]), &[2])),
        (k("c"), r(vc(&[(4, 1)]), &[2])),
    ]
    .into();
    let u = union(&a, &b);
    assert_eq!(u[&k("a")], a[&k("a")]);
    assert_eq!(u[&k("c")], b[&k("c")]);
    assert_eq!(u[&k("b")], r(vc(&[(2, 1), (3, 1)]), &[1, 2]));
    assert_eq!(union(&b, &a), u);
    assert!(supersedes(&u, &a) && supersedes(&u, &b));
    assert!(!supersedes(&a, &u));
    assert!(contained_in(&restrict(&u, &ks(&["a", "c"])), &u));
    assert!(!contained_in(&a, &u), "a's b is older than u's b");
    assert_eq!(restrict(&u, &ks(&["b"])).len(), 1);
}

#[test]
fn fetches_are_grouped_by_source_without_the_asking_cache() {
    let refs: VersionSet = [
        (k("a"), r(vc(&[(1, 1)]), &[1, 2])),
        (k("b"), r(vc(&[(1, 1)]), &[2])),
        (k("c"), VersionRef::bottom()),
    ]
    .into();
    let by = fetches_by_source(&refs, CacheId(1));
    assert_eq!(by.len(), 1);
    assert_eq!(
        by[&CacheId(2)].keys().cloned().collect::<BTreeSet<_>>(),
        ks(&["a", "b"])
    );
}

/// Checklist 15's shape: a depends on x, x on b; x is outside the keyset. A versionset
/// binding a but an old b is not a KOC; the dependency is found through x.
#[test]
fn koc_check_follows_dependencies_through_keys_outside_the_keyset() {
    let deps = |key: &crate::Key, _: &VectorClock| -> BTreeMap<crate::Key, VectorClock> {
        match &key[..] {
            b"a" => [(k("x"), vc(&[(9, 1)]))].into(),
            b"x" => [(k("b"), vc(&[(2, 2)]))].into(),
            _ => BTreeMap::new(),
        }
    };
    let keys = ks(&["a", "b"]);
    let good: VersionSet = [
        (k("a"), r(vc(&[(1, 1)]), &[1])),
        (k("b"), r(vc(&[(2, 3)]), &[1])),
    ]
    .into();
    assert!(koc_violations(&good, &keys, deps).is_empty());
    let stale: VersionSet = [
        (k("a"), r(vc(&[(1, 1)]), &[1])),
        (k("b"), r(vc(&[(2, 1)]), &[1])),
    ]
    .into();
    let v = koc_violations(&stale, &keys, deps);
    assert_eq!(
        v,
        vec![KocViolation::NotSuperseded {
            key: k("a"),
            dep: k("b"),
            needed: vc(&[(2, 2)]),
            have: Some(vc(&[(2, 1)])),
        }]
    );
    // Missing b altogether is a violation too; a key outside the keyset is one as well.
    let missing: VersionSet = [(k("a"), r(vc(&[(1, 1)]), &[1]))].into();
    assert_eq!(koc_violations(&missing, &keys, deps).len(), 1);
    let outside: VersionSet = [(k("x"), r(vc(&[(9, 1)]), &[1]))].into();
    assert_eq!(
        koc_violations(&outside, &keys, deps),
        vec![KocViolation::OutsideKeyset { key: k("x") }]
    );
}

#[test]
fn koc_check_terminates_on_cycles() {
    // Mutually dependent a and b (one commit): each needs the other.
    let deps = |key: &crate::Key, c: &VectorClock| -> BTreeMap<crate::Key, VectorClock> {
        match &key[..] {
            _ if c.is_empty() => BTreeMap::new(),
            b"a" => [(k("b"), vc(&[(1, 1)]))].into(),
            b"b" => [(k("a"), vc(&[(1, 1)]))].into(),
            _ => BTreeMap::new(),
        }
    };
    let both: VersionSet = [
        (k("a"), r(vc(&[(1, 1)]), &[1])),
        (k("b"), r(vc(&[(1, 1)]), &[1])),
    ]
    .into();
    assert!(koc_violations(&both, &ks(&["a", "b"]), deps).is_empty());
    let torn: VersionSet = [
        (k("a"), r(vc(&[(1, 1)]), &[1])),
        (k("b"), VersionRef::bottom()),
    ]
    .into();
    assert_eq!(koc_violations(&torn, &ks(&["a", "b"]), deps).len(), 1);
}
