//! OPT: both worked examples of §4.2.6, Case I, Case II fallback, aborts, the parallel flow
//! and the shell-facing plan / NotCached paths.

use std::collections::BTreeMap;

use super::examples::{abort, data_fetch, Example, N1, N2};
use super::world::{fill, write, Store};
use super::{here, k, ks, vc};
use crate::checker::{check, ReadMeta};
use crate::opt::{finish, parallel_flow, plan, validate, Abort, Finished, Upstream, Validated};
use crate::versionset::{contained_in, VersionRef};
use crate::{Cut, Error, Executor, Here, KeySet, MultiKeyCausal, PinLimits, Pins, ReqId};

const REQ: ReqId = ReqId(42);

fn at(cache: crate::CacheId) -> Here {
    Here {
        req: REQ,
        ..here(cache.0, REQ.0)
    }
}

/// Runs Algorithm 1 for one function at `cut`/`pins`, fetching remote versions from
/// `others`; `Err` is the abort.
fn run(
    cut: &mut Cut,
    pins: &mut Pins,
    h: Here,
    others: &[&Pins],
    rd: &KeySet,
    up: &Upstream,
) -> Result<Finished, Abort> {
    let rdag = ks(&["a", "b"]);
    let v = match validate(cut, pins, h, rd, &rdag, up).expect("validate") {
        Validated::Valid(v) => v,
        Validated::Abort(a) => return Err(a),
    };
    let mut fetched = Vec::new();
    for refs in v.fetches(h.cache).values() {
        for p in others {
            fetched.extend(p.fetch_refs(h.req, refs));
        }
    }
    Ok(finish(pins, h, v, up, fetched).expect("finish"))
}

fn reads_of(parts: &[&BTreeMap<crate::Key, MultiKeyCausal>]) -> BTreeMap<crate::Key, ReadMeta> {
    parts
        .iter()
        .flat_map(|m| m.iter().map(|(k, v)| (k.clone(), ReadMeta::of(v))))
        .collect()
}

/// §4.2.6 "OPT data fetch": F2's local b_0 does not supersede S_u's b_1 (Case I), so F2
/// reads b_0 ⊔ b_1 = b_1, fetched from N1's pins.
#[test]
fn worked_example_data_fetch() {
    let Example {
        store,
        mut c1,
        mut c2,
        mut p1,
        mut p2,
        ..
    } = data_fetch();
    let f1 = run(
        &mut c1,
        &mut p1,
        at(N1),
        &[],
        &ks(&["a"]),
        &Upstream::source(),
    )
    .unwrap();
    let b1 = store.latest(b"b").unwrap().clock();
    assert_eq!(f1.s_new[&k("b")], VersionRef::new(b1.clone(), N1));
    assert_eq!(f1.r_new.keys().cloned().collect::<Vec<_>>(), vec![k("a")]);

    let up = f1.downstream();
    let Validated::Valid(v) =
        validate(&mut c2, &mut p2, at(N2), &ks(&["b"]), &ks(&["a", "b"]), &up).unwrap()
    else {
        panic!("no abort in the data-fetch example");
    };
    assert_eq!(v.repaired, ks(&["b"]));
    assert!(!v.is_metadata_only());
    assert_eq!(v.fetches(N2).keys().copied().collect::<Vec<_>>(), vec![N1]);
    let fetched = p1.fetch_refs(REQ, &v.fetches(N2)[&N1]);
    let f2 = finish(&mut p2, at(N2), v, &up, fetched).unwrap();
    assert_eq!(f2.r_d[&k("b")].clock(), b1);
    assert!(contained_in(&f2.r_new, &f2.s_new));
    assert!(check(&reads_of(&[&f1.r_d, &f2.r_d])).is_clean());
    assert!(store
        .log
        .koc_violations(&f2.s_new, &ks(&["a", "b"]))
        .is_empty());
}

/// §4.2.6 "Unfixable abort": F2's b_1 depends on a_2, F1 read a_1, and b is not in S_u.
#[test]
fn worked_example_abort() {
    let mut ex = abort();
    let f1 = run(
        &mut ex.c1,
        &mut ex.p1,
        at(N1),
        &[],
        &ks(&["a"]),
        &Upstream::source(),
    )
    .unwrap();
    assert_eq!(f1.s_new.len(), 1);
    let got = run(
        &mut ex.c2,
        &mut ex.p2,
        at(N2),
        &[&ex.p1],
        &ks(&["b"]),
        &f1.downstream(),
    );
    assert_eq!(
        got.unwrap_err(),
        Abort::Unfixable {
            key: k("b"),
            dep: k("a")
        }
    );
    assert_eq!(ex.p2.requests(), 0, "an abort pins nothing");
}

/// Case II with a fallback: F2's local b_2 depends on a newer a than F1 read, but S_u has
/// an older b to read instead (and the scan of b stops there, E3).
#[test]
fn case_two_falls_back_to_the_upstream_version() {
    let mut store = Store::default();
    let (mut e1, mut e2, mut e3) = (
        Executor::new(1, 8),
        Executor::new(2, 8),
        Executor::new(3, 8),
    );
    write(&mut store, &mut e1, &[], &[("b", "b1")]);
    write(&mut store, &mut e2, &["b"], &[("a", "a1")]);
    let mut c1 = Cut::new(1 << 20);
    fill(&mut c1, &["a"], &store);
    let b1 = store.latest(b"b").unwrap().clock();
    write(&mut store, &mut e1, &["a"], &[("a", "a2")]);
    write(&mut store, &mut e3, &["a", "b"], &[("b", "b2")]);
    let mut c2 = Cut::new(1 << 20);
    fill(&mut c2, &["b"], &store);
    let (mut p1, mut p2) = (
        Pins::new(PinLimits::default()),
        Pins::new(PinLimits::default()),
    );

    let f1 = run(
        &mut c1,
        &mut p1,
        at(N1),
        &[],
        &ks(&["a"]),
        &Upstream::source(),
    )
    .unwrap();
    let up = f1.downstream();
    let Validated::Valid(v) =
        validate(&mut c2, &mut p2, at(N2), &ks(&["b"]), &ks(&["a", "b"]), &up).unwrap()
    else {
        panic!("b can fall back");
    };
    assert_eq!(v.fell_back, ks(&["b"]));
    assert!(v.r_local.is_empty() && v.s_d.is_empty());
    assert_eq!(v.r_remote[&k("b")].clock, b1);
    let fetched = p1.fetch_refs(REQ, &v.r_remote);
    let f2 = finish(&mut p2, at(N2), v, &up, fetched).unwrap();
    assert_eq!(f2.r_d[&k("b")].clock(), b1);
    assert!(contained_in(&f2.r_new, &f2.s_new));
    assert!(check(&reads_of(&[&f1.r_d, &f2.r_d])).is_clean());
}

/// Checklist 21: a V-DAG whose branches read incompatible versions aborts at the fan-in;
/// compatible branches pass and forward the union.
#[test]
fn parallel_flow_aborts_on_incompatible_branches() {
    let mut ex = abort();
    let left = run(
        &mut ex.c1,
        &mut ex.p1,
        at(N1),
        &[],
        &ks(&["a"]),
        &Upstream::source(),
    )
    .unwrap();
    let right = run(
        &mut ex.c2,
        &mut ex.p2,
        at(N2),
        &[],
        &ks(&["b"]),
        &Upstream::source(),
    )
    .unwrap();
    assert_eq!(
        parallel_flow(&[left.downstream(), right.downstream()]),
        Err(Abort::Incompatible { key: k("a") })
    );
    // The left branch on N2 reads a_2: compatible.
    let left2 = run(
        &mut ex.c2,
        &mut ex.p2,
        at(N2),
        &[],
        &ks(&["a"]),
        &Upstream::source(),
    )
    .unwrap();
    let joined = parallel_flow(&[left2.downstream(), right.downstream()]).unwrap();
    assert_eq!(
        joined.r.keys().cloned().collect::<KeySet>(),
        ks(&["a", "b"])
    );
    assert!(contained_in(&joined.r, &joined.s));
    assert_eq!(
        parallel_flow(&[joined.clone(), Upstream::aborted()]),
        Err(Abort::Upstream)
    );
}

#[test]
fn aborts_propagate_and_missing_keys_are_reported() {
    let mut ex = data_fetch();
    let h = at(N1);
    let rdag = ks(&["a", "b"]);
    assert_eq!(
        validate(
            &mut ex.c1,
            &mut ex.p1,
            h,
            &ks(&["a"]),
            &rdag,
            &Upstream::aborted()
        ),
        Ok(Validated::Abort(Abort::Upstream))
    );
    // b is neither cached at N2's empty cut nor offered upstream: stage it first.
    let mut empty = Cut::new(1 << 20);
    let rd = ks(&["b", "c"]);
    let mut up = Upstream::source();
    up.s.insert(k("c"), VersionRef::new(vc(&[(5, 1)]), N1));
    let p = plan(&empty, &rd, &up);
    assert_eq!(p.from_store, ks(&["b"]));
    assert_eq!(
        p.from_upstream.keys().cloned().collect::<KeySet>(),
        ks(&["c"])
    );
    assert_eq!(
        validate(&mut empty, &mut ex.p1, h, &rd, &rdag, &up),
        Err(Error::NotCached { keys: vec![k("b")] })
    );
    // A remote version that no longer exists (pins released) fails the finish.
    let f1 = run(
        &mut ex.c1,
        &mut ex.p1,
        h,
        &[],
        &ks(&["a"]),
        &Upstream::source(),
    )
    .unwrap();
    let up = f1.downstream();
    let Validated::Valid(v) =
        validate(&mut ex.c2, &mut ex.p2, at(N2), &ks(&["b"]), &rdag, &up).unwrap()
    else {
        panic!()
    };
    ex.p1.release(REQ);
    let fetched = ex.p1.fetch_refs(REQ, &v.r_remote);
    assert!(matches!(
        finish(&mut ex.p2, at(N2), v, &up, fetched),
        Err(Error::MissingRemote { .. })
    ));
}
