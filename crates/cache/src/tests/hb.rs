//! HB: the simulation predicts both worked examples, with prefetch notices, and result
//! reuse compares versions.

use super::examples::{abort, data_fetch, N1, N2};
use super::ks;
use crate::hb::{reuse, simulate, view, Simulation};
use crate::opt::Abort;
use crate::versionset::VersionRef;
use crate::{Dag, VectorClock};

#[test]
fn the_simulation_predicts_the_abort() {
    let ex = abort();
    let dag = Dag::linear(vec![ks(&["a"]), ks(&["b"])]);
    let rdag = dag.rdag();
    let views = [
        view(&ex.c1, N1, &ks(&["a"]), &rdag),
        view(&ex.c2, N2, &ks(&["b"]), &rdag),
    ];
    assert_eq!(
        simulate(&dag, &views),
        Simulation::Abort {
            at: 1,
            reason: Abort::Unfixable {
                key: super::k("b"),
                dep: super::k("a"),
            },
        }
    );
    // A V-shaped DAG over the same caches aborts at the fan-in.
    let v = Dag::fan_in(vec![ks(&["a"]), ks(&["b"])], ks(&[]));
    let rdag = v.rdag();
    let views = [
        view(&ex.c1, N1, &ks(&["a"]), &rdag),
        view(&ex.c2, N2, &ks(&["b"]), &rdag),
        view(&ex.c2, N2, &ks(&[]), &rdag),
    ];
    assert!(matches!(
        simulate(&v, &views),
        Simulation::Abort {
            at: 2,
            reason: Abort::Incompatible { .. }
        }
    ));
}

#[test]
fn the_simulation_plans_the_data_fetch() {
    let ex = data_fetch();
    let dag = Dag::linear(vec![ks(&["a"]), ks(&["b", "c"])]);
    let rdag = dag.rdag();
    let views = [
        view(&ex.c1, N1, &ks(&["a"]), &rdag),
        view(&ex.c2, N2, &ks(&["b", "c"]), &rdag),
    ];
    let Simulation::Ok {
        prefetch,
        data_fetch,
        s,
        r,
    } = simulate(&dag, &views)
    else {
        panic!("the data-fetch example passes");
    };
    assert!(data_fetch);
    assert_eq!(prefetch[1].from_store, ks(&["c"]), "c is not cached at N2");
    let b1 = ex.store.latest(b"b").unwrap().clock();
    assert_eq!(
        prefetch[1].from_upstream[&super::k("b")],
        VersionRef::new(b1.clone(), N1)
    );
    assert_eq!(r[&super::k("b")].clock, b1);
    assert!(crate::versionset::contained_in(&r, &s));
    // Metadata only: both functions on N1.
    let views = [
        view(&ex.c1, N1, &ks(&["a"]), &rdag),
        view(&ex.c1, N1, &ks(&["b", "c"]), &rdag),
    ];
    assert!(matches!(
        simulate(&dag, &views),
        Simulation::Ok {
            data_fetch: false,
            ..
        }
    ));
}

#[test]
fn results_are_reused_only_for_the_same_versions() {
    let x: crate::VersionSet = [(
        super::k("a"),
        VersionRef::new(VectorClock::from_iter([(1, 1)]), N1),
    )]
    .into();
    let mut y = x.clone();
    assert!(reuse(&x, &y));
    y.get_mut(&super::k("a")).unwrap().sources.insert(N2);
    assert!(reuse(&x, &y), "sources do not matter");
    y.get_mut(&super::k("a")).unwrap().clock = VectorClock::from_iter([(1, 2)]);
    assert!(!reuse(&x, &y));
    assert!(!reuse(&x, &Default::default()));
}
