//! CON: the abort example of §4.2.6 succeeds, and every function reads `S ∩ R̃_i`.

use std::collections::BTreeMap;

use super::examples::{abort, N1, N2};
use super::{here, k, ks};
use crate::checker::{check, ReadMeta};
use crate::con::{bind, plan};
use crate::snapshot::create_snapshot;
use crate::versionset::{refs_of, restrict};
use crate::{Error, Here};

/// Checklist 23: under CON the abort example commits: S = {a_1} ∪ {a_2, b_1} = {a_2, b_1};
/// N1 fetches a_2 from N2's pins; F1 reads a_2 and F2 reads b_1.
#[test]
fn the_abort_example_succeeds_under_con() {
    let mut ex = abort();
    let (h1, h2) = (
        here(N1.0, 9),
        Here {
            cache: N2,
            ..here(N1.0, 9)
        },
    );
    let rdag = ks(&["a", "b"]);
    let (r1, r2) = (ks(&["a"]), ks(&["b"]));
    let s1 = create_snapshot(&mut ex.c1, &mut ex.p1, h1, &r1, &rdag).unwrap();
    let s2 = create_snapshot(&mut ex.c2, &mut ex.p2, h2, &r2, &rdag).unwrap();
    let con = plan(&[(s1, r1.clone()), (s2, r2.clone())]);
    let a2 = ex.store.latest(b"a").unwrap().clock();
    assert_eq!(con.s[&k("a")].clock, a2);
    assert_eq!(con.s[&k("a")].sources, [N2].into());
    assert_eq!(
        con.parts[0].remote.keys().cloned().collect::<Vec<_>>(),
        vec![k("a")]
    );
    assert!(con.parts[1].remote.is_empty());

    let fetched = ex.p2.fetch_refs(h1.req, &con.parts[0].remote);
    let read1 = bind(&mut ex.p1, h1, &con.parts[0], fetched).unwrap();
    let read2 = bind(&mut ex.p2, h2, &con.parts[1], []).unwrap();
    assert_eq!(read1[&k("a")].clock(), a2);
    assert_eq!(
        refs_of(&read1, N1)[&k("a")].clock,
        restrict(&con.s, &r1)[&k("a")].clock
    );
    assert_eq!(read2[&k("b")].clock(), con.s[&k("b")].clock);
    let reads: BTreeMap<_, _> = read1
        .iter()
        .chain(&read2)
        .map(|(k, v)| (k.clone(), ReadMeta::of(v)))
        .collect();
    assert!(check(&reads).is_clean());
    assert!(ex.store.log.koc_violations(&con.s, &rdag).is_empty());

    // Without N2's answer N1 cannot bind.
    ex.p2.release(h2.req);
    ex.p1.release(h1.req);
    let s1 = create_snapshot(&mut ex.c1, &mut ex.p1, h1, &r1, &rdag).unwrap();
    let con = plan(&[(s1, r1), (con.s.clone(), r2)]);
    assert!(matches!(
        bind(&mut ex.p1, h1, &con.parts[0], []),
        Err(Error::MissingRemote { .. })
    ));
}
