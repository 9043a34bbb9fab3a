//! The cut: Def. 3 checking, eviction with transitive dependents, LRU and capacity, and the
//! I2 scenario of spec §2.7.

use super::world::{fill, run_staging, write, Store};
use super::{k, vc, ver};
use crate::cut::{value_bytes, CutViolation};
use crate::{Cut, Error, Executor, Staging};

/// a ← b ← c (c depends on b, b on a), d alone.
fn chain() -> Store {
    let mut store = Store::default();
    store.put(&k("a"), &ver(vc(&[(1, 1)]), &[], "a"));
    store.put(&k("b"), &ver(vc(&[(2, 1)]), &[("a", vc(&[(1, 1)]))], "b"));
    store.put(&k("c"), &ver(vc(&[(3, 1)]), &[("b", vc(&[(2, 1)]))], "c"));
    store.put(&k("d"), &ver(vc(&[(4, 1)]), &[], "d"));
    store
}

/// Checklist 13: evicting k evicts every key that transitively depends on it.
#[test]
fn eviction_takes_every_transitive_dependent() {
    let store = chain();
    let mut cut = Cut::new(1 << 20);
    fill(&mut cut, &["c", "d"], &store);
    assert_eq!(cut.len(), 4);
    assert_eq!(cut.dependents(b"a"), [k("b"), k("c")].into());
    assert_eq!(cut.evict(b"a"), vec![k("a"), k("b"), k("c")]);
    assert_eq!(cut.keys().cloned().collect::<Vec<_>>(), vec![k("d")]);
    cut.check().unwrap();
    assert!(cut.evict(b"a").is_empty());
    assert_eq!(cut.bytes(), value_bytes(b"d", cut.get(b"d").unwrap()));
}

#[test]
fn lru_eviction_follows_use() {
    let store = chain();
    let mut cut = Cut::new(1 << 20);
    fill(&mut cut, &["a"], &store);
    fill(&mut cut, &["d"], &store);
    // a is older than d; reading a makes d the least recently used.
    assert!(cut.read(b"a").is_some());
    assert_eq!(cut.evict_lru(1), vec![k("d")]);
    fill(&mut cut, &["c"], &store);
    // Freeing everything works through dependents too.
    let all = cut.evict_lru(usize::MAX);
    assert_eq!(all.len(), 3);
    assert!(cut.is_empty());
    cut.check().unwrap();
}

/// Merging evicts least-recently-used keys to fit, never one the batch depends on; if that
/// is not enough the merge is refused and nothing changes (the paper reschedules).
#[test]
fn merging_makes_room_or_refuses_whole() {
    let store = chain();
    let one = value_bytes(b"d", &store.latest(b"d").unwrap());
    let mut cut = Cut::new(one * 2 + 40);
    fill(&mut cut, &["d"], &store);
    fill(&mut cut, &["a"], &store);
    // b needs a: staging b must evict d (least recent), not a.
    let merged = fill(&mut cut, &["b"], &store);
    assert_eq!(merged.evicted, vec![k("d")]);
    assert!(cut.contains(b"a") && cut.contains(b"b"));
    cut.check().unwrap();

    // A cut too small for c's closure: refused, unchanged.
    let mut small = Cut::new(one * 2 + 40);
    fill(&mut small, &["d"], &store);
    let before: Vec<_> = small.keys().cloned().collect();
    let s = Staging::for_keys([k("c")], &small);
    let r = run_staging(&mut small, s, &store, |_, _| 0);
    assert!(matches!(r, Err(Error::WouldExceedCapacity { .. })), "{r:?}");
    assert_eq!(small.keys().cloned().collect::<Vec<_>>(), before);
    small.check().unwrap();
}

/// The checker finds a hand-broken cut.
#[test]
fn check_finds_a_broken_cut() {
    let mut cut = Cut::new(1 << 20);
    cut.insert_unchecked(k("b"), ver(vc(&[(2, 1)]), &[("a", vc(&[(1, 2)]))], "b"));
    assert_eq!(
        cut.check(),
        Err(CutViolation::NotSuperseded {
            key: k("b"),
            dep: k("a"),
            needed: vc(&[(1, 2)]),
            have: None,
        })
    );
    cut.insert_unchecked(k("a"), ver(vc(&[(1, 1)]), &[], "a"));
    let stale = cut.check().unwrap_err();
    assert!(matches!(
        stale,
        CutViolation::NotSuperseded { have: Some(_), .. }
    ));
    assert!(stale.to_string().starts_with("b depends on a"), "{stale}");
    cut.insert_unchecked(k("a"), ver(vc(&[(1, 2)]), &[], "a"));
    cut.check().unwrap();
}

/// Checklist 6 / spec I2: W1 writes a_1 over a_0; W2 reads a_1 and writes b_1; W3 reads only
/// b_1 and writes b_2. A cache holding a_0 must never expose b_2 without a ⊒ a_1 — b_2
/// inherited b_1's dependency on a_1.
#[test]
fn an_inherited_dependency_keeps_a_stale_key_out() {
    let mut store = Store::default();
    let (mut w1, mut w2, mut w3) = (
        Executor::new(1, 8),
        Executor::new(2, 8),
        Executor::new(3, 8),
    );
    write(&mut store, &mut w1, &[], &[("a", "a0")]);
    let mut cut = Cut::new(1 << 20);
    fill(&mut cut, &["a"], &store);
    let a0 = cut.get(b"a").unwrap().clock();
    write(&mut store, &mut w1, &["a"], &[("a", "a1")]);
    write(&mut store, &mut w2, &["a"], &[("b", "b1")]);
    let b2 = write(&mut store, &mut w3, &["b"], &[("b", "b2")]);
    let a1 = store.latest(b"a").unwrap().clock();
    assert_eq!(b2[0].1.deps()[&k("a")], a1, "b_2 inherits b_1's dependency");

    // The store pushes b_2; the replica asked for a first answers a_0 (lag).
    let s = Staging::for_pushed(b2.clone(), &cut).unwrap();
    run_staging(&mut cut, s, &store, |key, attempt| {
        usize::from(&key[..] == b"a" && attempt == 0)
    })
    .unwrap();
    cut.check().unwrap();
    assert!(a1.leq(&cut.get(b"a").unwrap().clock()));
    assert!(!a1.leq(&a0));

    // Without inheritance b_2 would have merged next to a_0: the anomaly I2 prevents.
    let mut naive = Cut::new(1 << 20);
    naive.insert_unchecked(k("a"), store.lagged(b"a", 1).unwrap());
    let mut bare = b2[0].1.clone();
    bare = lattice::MultiKeyCausal::from_versions(bare.versions().iter().map(|v| {
        let mut v = v.clone();
        v.deps.remove(&k("a"));
        v
    }));
    let s = Staging::for_pushed([(k("b"), bare)], &naive).unwrap();
    run_staging(&mut naive, s, &store, |_, _| 0).unwrap();
    assert_eq!(naive.get(b"a").unwrap().clock(), a0, "b_2 exposed with a_0");
}
