//! Pins: exact fetches, multi-source merges, bounds, release and deadlines.

use std::collections::BTreeMap;

use lattice::Lattice;

use super::world::{fill, run_staging, Store};
use super::{here, k, ks, vc, ver};
use crate::snapshot::create_snapshot;
use crate::versionset::{union, VersionRef};
use crate::{CacheId, Cut, Error, PinLimits, Pins, ReqId, Staging, VersionSet};

#[test]
fn fetch_answers_what_was_pinned_at_or_below_the_clock() {
    let mut pins = Pins::new(PinLimits::default());
    let a1 = ver(vc(&[(1, 1)]), &[], "a1");
    let a2 = ver(vc(&[(1, 2)]), &[], "a2");
    let r = ReqId(1);
    assert_eq!(pins.pin(r, 10, [(k("a"), a1.clone())]).unwrap(), 1);
    assert_eq!(
        pins.pin(r, 10, [(k("a"), a1.clone())]).unwrap(),
        0,
        "no double pin"
    );
    assert_eq!(
        pins.pin(r, 10, [(k("a"), a2.clone()), (k("z"), Default::default())])
            .unwrap(),
        1
    );
    assert_eq!(pins.versions(), 2);
    assert_eq!(pins.get(r, b"a", &vc(&[(1, 1)])), Some(&a1));
    assert_eq!(pins.pinned(r, b"a").collect::<Vec<_>>(), vec![&a1, &a2]);
    assert_eq!(pins.pinned(ReqId(9), b"a").count(), 0);
    assert_eq!(pins.fetch(r, b"a", &vc(&[(1, 1)])), Some(a1.clone()));
    assert_eq!(pins.fetch(r, b"a", &vc(&[(1, 5)])), Some(a2.clone()));
    assert_eq!(pins.fetch(r, b"a", &vc(&[(2, 1)])), None);
    assert_eq!(pins.fetch(ReqId(2), b"a", &vc(&[(1, 1)])), None);
    assert_eq!(
        pins.fetch(r, b"z", &vc(&[])),
        None,
        "bottoms are not pinned"
    );
}

/// A versionset entry that merges versions pinned at two caches: fetching from both
/// sources and merging gives exactly the named clock.
#[test]
fn a_union_entry_is_fetched_from_every_source() {
    let (mut p1, mut p2) = (
        Pins::new(PinLimits::default()),
        Pins::new(PinLimits::default()),
    );
    let r = ReqId(3);
    let ax = ver(vc(&[(1, 1)]), &[], "x");
    let ay = ver(vc(&[(2, 1)]), &[], "y");
    p1.pin(r, 10, [(k("a"), ax.clone())]).unwrap();
    p2.pin(r, 10, [(k("a"), ay.clone())]).unwrap();
    let s1: VersionSet = [(k("a"), VersionRef::new(ax.clock(), CacheId(1)))].into();
    let s2: VersionSet = [(k("a"), VersionRef::new(ay.clock(), CacheId(2)))].into();
    let s = union(&s1, &s2);
    let mut got = p1.fetch_refs(r, &s).remove(&k("a")).unwrap();
    got.merge(p2.fetch_refs(r, &s).remove(&k("a")).unwrap());
    assert_eq!(got.clock(), s[&k("a")].clock);
    assert_eq!(got.values().count(), 2);
}

#[test]
fn bounds_refuse_a_pin_whole() {
    let mut pins = Pins::new(PinLimits {
        max_versions: 2,
        max_bytes: 1 << 20,
    });
    let v = |i| ver(vc(&[(1, i)]), &[], "v");
    pins.pin(ReqId(1), 10, [(k("a"), v(1))]).unwrap();
    let err = pins.pin(ReqId(2), 10, [(k("a"), v(2)), (k("b"), v(3))]);
    assert!(matches!(
        err,
        Err(Error::PinsFull {
            versions: 1,
            max_versions: 2,
            ..
        })
    ));
    assert_eq!(pins.versions(), 1);
    assert_eq!(pins.requests(), 1, "a refused request leaves no entry");
    pins.release(ReqId(1));
    pins.pin(ReqId(2), 10, [(k("a"), v(2)), (k("b"), v(3))])
        .unwrap();
    let mut tiny = Pins::new(PinLimits {
        max_versions: 10,
        max_bytes: 10,
    });
    assert!(tiny.pin(ReqId(1), 10, [(k("a"), v(1))]).is_err());
    assert_eq!(tiny.limits().max_bytes, 10);
}

#[test]
fn deadlines_drop_pins_whose_release_never_came() {
    let mut pins = Pins::new(PinLimits::default());
    pins.pin(ReqId(1), 100, [(k("a"), ver(vc(&[(1, 1)]), &[], "a"))])
        .unwrap();
    pins.pin(ReqId(2), 200, [(k("a"), ver(vc(&[(1, 2)]), &[], "a"))])
        .unwrap();
    pins.extend(ReqId(1), 300);
    assert!(pins.expire(100).is_empty());
    assert_eq!(pins.expire(250), vec![ReqId(2)]);
    assert_eq!(pins.expire(301), vec![ReqId(1)]);
    assert_eq!((pins.versions(), pins.bytes(), pins.requests()), (0, 0, 0));
}

/// Checklist 19: nothing leaks after 10k requests, whether they end, abort or die.
#[test]
fn no_leak_after_ten_thousand_requests() {
    let mut pins = Pins::new(PinLimits::default());
    for i in 0..10_000u64 {
        let value = ver(vc(&[(1, i + 1)]), &[("b", vc(&[(2, i)]))], "payload");
        pins.pin(ReqId(i), i + 5, [(k("a"), value.clone()), (k("b"), value)])
            .unwrap();
        match i % 3 {
            0 => assert_eq!(pins.release(ReqId(i)), 2), // DAG end
            1 => assert_eq!(pins.release(ReqId(i)), 2), // abort / fallback
            _ => {}                                     // the sink died: expires
        }
        pins.expire(i);
    }
    pins.expire(u64::MAX);
    assert_eq!((pins.versions(), pins.bytes(), pins.requests()), (0, 0, 0));
}

/// Checklist 19: a downstream cache fetches exactly the pinned version even after the
/// upstream cut advanced.
#[test]
fn a_downstream_fetch_gets_the_pinned_version_after_the_cut_moved() {
    let mut store = Store::default();
    store.put(&k("a"), &ver(vc(&[(1, 1)]), &[], "a1"));
    let mut cut = Cut::new(1 << 20);
    let mut pins = Pins::new(PinLimits::default());
    fill(&mut cut, &["a"], &store);
    let h = here(1, 4);
    let s_d = create_snapshot(&mut cut, &mut pins, h, &ks(&["a"]), &ks(&["a", "b"])).unwrap();
    let a2 = ver(vc(&[(1, 2)]), &[], "a2");
    store.put(&k("a"), &a2);
    let s = Staging::for_pushed([(k("a"), a2.clone())], &cut).unwrap();
    run_staging(&mut cut, s, &store, |_, _| 0).unwrap();
    assert_eq!(cut.get(b"a"), Some(&a2));
    let got: BTreeMap<_, _> = pins.fetch_refs(h.req, &s_d);
    assert_eq!(got[&k("a")].clock(), vc(&[(1, 1)]));
}
