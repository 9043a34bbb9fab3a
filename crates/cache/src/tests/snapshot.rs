//! RetrieveCut (E1, transitivity through keys outside `R̃_DAG`), CreateSnapshot and CT.

use super::world::{fill, run_staging, Store};
use super::{here, k, ks, vc, ver};
use crate::snapshot::{create_snapshot, ct_snapshot, ct_snapshot_shared, retrieve_cut};
use crate::versionset::{refs_of, VersionRef};
use crate::{CacheId, Cut, Error, PinLimits, Pins, Shared, Staging};

/// b ← x ← a (a depends on x, x on b), and an unrelated c.
fn store() -> Store {
    let mut store = Store::default();
    store.put(&k("b"), &ver(vc(&[(2, 1)]), &[], "b1"));
    store.put(&k("x"), &ver(vc(&[(9, 1)]), &[("b", vc(&[(2, 1)]))], "x1"));
    store.put(&k("a"), &ver(vc(&[(1, 1)]), &[("x", vc(&[(9, 1)]))], "a1"));
    store.put(&k("c"), &ver(vc(&[(3, 1)]), &[], "c1"));
    store
}

/// Checklist 15 and erratum E1: the result holds k itself and b's constraint found through
/// x ∉ R̃_DAG, and it is a KOC.
#[test]
fn retrieve_cut_includes_the_key_and_goes_through_outside_keys() {
    let store = store();
    let mut cut = Cut::new(1 << 20);
    fill(&mut cut, &["a", "c"], &store);
    let rdag = ks(&["a", "b", "c"]);
    let s = retrieve_cut(&cut, CacheId(1), b"a", &rdag);
    assert_eq!(s.keys().cloned().collect::<Vec<_>>(), vec![k("a"), k("b")]);
    assert_eq!(s[&k("b")], VersionRef::new(vc(&[(2, 1)]), CacheId(1)));
    assert!(store.log.koc_violations(&s, &rdag).is_empty());
    // A key without dependencies is its own cut (the paper's C' := ∅ would give nothing).
    let c = retrieve_cut(&cut, CacheId(1), b"c", &rdag);
    assert_eq!(c.keys().cloned().collect::<Vec<_>>(), vec![k("c")]);
    // Not cached: bound to the bottom.
    let z = retrieve_cut(&cut, CacheId(1), b"z", &ks(&["z"]));
    assert!(z[&k("z")].is_bottom());
}

/// Alg. 4: S_i is the union of the reads' cuts, pinned for the request.
#[test]
fn create_snapshot_pins_the_union() {
    let store = store();
    let mut cut = Cut::new(1 << 20);
    let mut pins = Pins::new(PinLimits::default());
    let h = here(1, 7);
    let rdag = ks(&["a", "b", "c"]);
    assert_eq!(
        create_snapshot(&mut cut, &mut pins, h, &ks(&["a", "c"]), &rdag),
        Err(Error::NotCached {
            keys: vec![k("a"), k("c")]
        })
    );
    fill(&mut cut, &["a", "c"], &store);
    let s = create_snapshot(&mut cut, &mut pins, h, &ks(&["a", "c"]), &rdag).unwrap();
    assert_eq!(
        s.keys().cloned().collect::<Vec<_>>(),
        vec![k("a"), k("b"), k("c")]
    );
    for (key, r) in &s {
        assert_eq!(pins.get(h.req, key, &r.clock), cut.get(key));
    }
    assert!(store.log.koc_violations(&s, &rdag).is_empty());
}

/// Checklist 17: CT pins C ∩ R̃_DAG; a refresh mid-DAG moves the cut, not what the DAG
/// reads.
#[test]
fn ct_reads_the_pinned_snapshot_across_a_refresh() {
    let mut store = store();
    let mut cut = Cut::new(1 << 20);
    let mut pins = Pins::new(PinLimits::default());
    let h = here(1, 8);
    let rdag = ks(&["a", "c"]);
    fill(&mut cut, &["a", "c"], &store);
    let snap = ct_snapshot(&mut cut, &mut pins, h, &rdag).unwrap();
    let refs = refs_of(&snap, h.cache);
    // Refresh: c moves on in the cut.
    let c2 = ver(vc(&[(3, 2)]), &[], "c2");
    store.put(&k("c"), &c2);
    let s = Staging::for_pushed([(k("c"), c2.clone())], &cut).unwrap();
    run_staging(&mut cut, s, &store, |_, _| 0).unwrap();
    assert_eq!(cut.get(b"c"), Some(&c2));
    // Every function of the DAG still reads the pinned c1.
    let c1 = pins.get(h.req, b"c", &refs[&k("c")].clock).unwrap();
    assert_eq!(c1.clock(), vc(&[(3, 1)]));
    assert_eq!(pins.fetch_refs(h.req, &refs), snap);
    assert_eq!(pins.release(h.req), 2);
}

/// CT's snapshot shares the cut's values (a pin is a reference count, not a copy of the
/// payloads), and a refresh replaces the cut's value without touching the shared one.
#[test]
fn a_shared_ct_snapshot_is_the_cuts_values_and_outlives_a_refresh() {
    let mut store = store();
    let mut cut = Cut::new(1 << 20);
    let mut pins = Pins::new(PinLimits::default());
    let h = here(1, 9);
    let rdag = ks(&["a", "c", "z"]);
    fill(&mut cut, &["a", "c", "z"], &store);
    let snap = ct_snapshot_shared(&mut cut, &mut pins, h, &rdag).unwrap();
    for key in ["a", "c"] {
        let cached = cut.get_shared(key.as_bytes()).unwrap();
        assert!(Shared::ptr_eq(&snap[&k(key)], cached), "{key} was copied");
        let pinned = pins.get(h.req, key.as_bytes(), &cached.clock()).unwrap();
        assert!(std::ptr::eq(pinned, &**cached), "{key}'s pin was copied");
    }
    assert!(snap[&k("z")].is_empty());
    // The owned form reads the same versions.
    let owned = ct_snapshot(&mut cut, &mut pins, here(1, 10), &rdag).unwrap();
    assert!(owned.iter().all(|(key, v)| *v == *snap[key]));
    // Refresh: c moves on in the cut; the snapshot and the pin keep c1.
    let c1 = snap[&k("c")].clone();
    let c2 = ver(vc(&[(3, 2)]), &[], "c2");
    store.put(&k("c"), &c2);
    let s = Staging::for_pushed([(k("c"), c2.clone())], &cut).unwrap();
    run_staging(&mut cut, s, &store, |_, _| 0).unwrap();
    assert_eq!(cut.get(b"c"), Some(&c2));
    assert_eq!(c1.clock(), vc(&[(3, 1)]));
    assert_eq!(pins.get(h.req, b"c", &c1.clock()), Some(&*c1));
    assert_eq!(pins.release(h.req), 2);
    cut.check().unwrap();
}
