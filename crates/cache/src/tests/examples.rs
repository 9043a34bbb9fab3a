//! The worked examples of spec §4.2.6 as fixtures: `R̃_DAG = {a, b}`, F1 at N1 reads
//! `{a}`, then F2 at N2 reads `{b}`.

use super::world::{fill, write, Store};
use crate::{CacheId, Cut, Executor, PinLimits, Pins};

pub(crate) const N1: CacheId = CacheId(1);
pub(crate) const N2: CacheId = CacheId(2);

/// Two caches over one store.
pub(crate) struct Example {
    pub(crate) store: Store,
    pub(crate) c1: Cut,
    pub(crate) c2: Cut,
    pub(crate) p1: Pins,
    pub(crate) p2: Pins,
}

impl Example {
    fn new(store: Store, c1: Cut, c2: Cut) -> Self {
        Example {
            store,
            c1,
            c2,
            p1: Pins::new(PinLimits::default()),
            p2: Pins::new(PinLimits::default()),
        }
    }
}

/// "OPT data fetch": b_1 was written over b_0, then a_2 depending on b_1. N1 holds a_2 and
/// b_1; N2 holds the older b_0.
pub(crate) fn data_fetch() -> Example {
    let mut store = Store::default();
    let (mut e1, mut e2) = (Executor::new(1, 8), Executor::new(2, 8));
    write(&mut store, &mut e1, &[], &[("b", "b0")]);
    let mut c2 = Cut::new(1 << 20);
    fill(&mut c2, &["b"], &store);
    write(&mut store, &mut e1, &["b"], &[("b", "b1")]);
    write(&mut store, &mut e2, &["b"], &[("a", "a2")]);
    let mut c1 = Cut::new(1 << 20);
    fill(&mut c1, &["a"], &store);
    Example::new(store, c1, c2)
}

/// "Unfixable abort": a_2 was written over a_1, then b_1 depending on a_2. N1 holds the
/// stale a_1; N2 holds b_1 and a_2.
pub(crate) fn abort() -> Example {
    let mut store = Store::default();
    let (mut e1, mut e2) = (Executor::new(1, 8), Executor::new(2, 8));
    write(&mut store, &mut e1, &[], &[("a", "a1")]);
    let mut c1 = Cut::new(1 << 20);
    fill(&mut c1, &["a"], &store);
    write(&mut store, &mut e1, &["a"], &[("a", "a2")]);
    write(&mut store, &mut e2, &["a"], &[("b", "b1")]);
    let mut c2 = Cut::new(1 << 20);
    fill(&mut c2, &["b"], &store);
    Example::new(store, c1, c2)
}
