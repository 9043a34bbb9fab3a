//! Properties over random histories: writers commit to a store, two caches fill (from
//! lagging replicas), refresh and evict at random; then a two-function DAG runs.
//! - Every cut passes Def. 3 after every step.
//! - Thm 1 / Lemma 2: the union of two caches' snapshots is a KOC, and its versions (fetched
//!   from the pins its sources name) are a strict snapshot: the checker finds nothing.
//! - Thm 2: whenever OPT validation succeeds, `R_new ⊆ S_new`, `S_new` is a KOC for `R̃_DAG`
//!   and the versions read are a snapshot (the checker finds nothing).
//! - CON always succeeds, with the same guarantees.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::world::{run_staging, write, Store};
use super::{here, k};
use crate::checker::{check, ReadMeta};
use crate::con;
use crate::opt::{finish, plan, validate, Finished, Upstream, Validated};
use crate::snapshot::create_snapshot;
use crate::versionset::{contained_in, restrict, union};
use crate::{Cut, Executor, Here, Key, KeySet, MultiKeyCausal, PinLimits, Pins, Staging};

const KEYS: [&str; 5] = ["a", "b", "c", "d", "e"];

fn keys(mask: u8) -> KeySet {
    KEYS.iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, s)| k(s))
        .collect()
}

#[derive(Clone, Debug)]
enum Op {
    Write { exec: usize, reads: u8, writes: u8 },
    Fill { cache: usize, keys: u8, lag: usize },
    Push { cache: usize, key: usize },
    Evict { cache: usize, key: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3usize, 0..32u8, 1..32u8).prop_map(|(exec, reads, writes)| Op::Write { exec, reads, writes }),
        2 => (0..2usize, 1..32u8, 0..3usize).prop_map(|(cache, keys, lag)| Op::Fill { cache, keys, lag }),
        2 => (0..2usize, 0..5usize).prop_map(|(cache, key)| Op::Push { cache, key }),
        1 => (0..2usize, 0..5usize).prop_map(|(cache, key)| Op::Evict { cache, key }),
    ]
}

struct World {
    store: Store,
    execs: Vec<Executor>,
    cuts: Vec<Cut>,
    pins: Vec<Pins>,
    steps: u64,
}

impl World {
    fn new() -> Self {
        World {
            store: Store::default(),
            execs: (0..3).map(|i| Executor::new(i + 1, 4)).collect(),
            cuts: (0..2).map(|_| Cut::new(1 << 20)).collect(),
            pins: (0..2).map(|_| Pins::new(PinLimits::default())).collect(),
            steps: 0,
        }
    }

    fn stage(&mut self, cache: usize, keys: KeySet, lag: usize) {
        let cut = &mut self.cuts[cache];
        let s = Staging::for_keys(keys, cut);
        let store = &self.store;
        run_staging(cut, s, store, |key, attempt| {
            if attempt == 0 {
                lag.min(store.depth(key).saturating_sub(1))
            } else {
                0
            }
        })
        .expect("staging");
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Write {
                exec,
                reads,
                writes,
            } => {
                let r: Vec<String> = keys(reads).iter().map(|k| crate::show(k)).collect();
                let w: Vec<(String, String)> = keys(writes)
                    .iter()
                    .map(|key| (crate::show(key), format!("v{}", self.steps)))
                    .collect();
                let r: Vec<&str> = r.iter().map(String::as_str).collect();
                let w: Vec<(&str, &str)> =
                    w.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
                write(&mut self.store, &mut self.execs[exec], &r, &w);
            }
            Op::Fill {
                cache,
                keys: mask,
                lag,
            } => self.stage(cache, keys(mask), lag),
            Op::Push { cache, key } => {
                let key = k(KEYS[key]);
                if let (true, Some(v)) = (self.cuts[cache].contains(&key), self.store.latest(&key))
                {
                    let cut = &mut self.cuts[cache];
                    let s = Staging::for_pushed([(key, v)], cut).expect("push");
                    run_staging(cut, s, &self.store, |_, _| 0).expect("push staging");
                }
            }
            Op::Evict { cache, key } => {
                self.cuts[cache].evict(KEYS[key].as_bytes());
            }
        }
        self.steps += 1;
        for cut in &self.cuts {
            cut.check().expect("Def. 3 after every step");
        }
    }

    fn at(&self, cache: usize, req: u64) -> Here {
        here(cache as u64 + 1, req)
    }

    /// Algorithm 1 for one function; `None` on abort.
    fn opt(
        &mut self,
        cache: usize,
        req: u64,
        rd: &KeySet,
        rdag: &KeySet,
        up: &Upstream,
    ) -> Option<Finished> {
        let p = plan(&self.cuts[cache], rd, up);
        self.stage(cache, p.from_store, 0);
        let h = self.at(cache, req);
        let v = match validate(
            &mut self.cuts[cache],
            &mut self.pins[cache],
            h,
            rd,
            rdag,
            up,
        )
        .expect("validate")
        {
            Validated::Valid(v) => v,
            Validated::Abort(_) => return None,
        };
        let mut fetched = Vec::new();
        for (source, refs) in v.fetches(h.cache) {
            fetched.extend(self.pins[source.0 as usize - 1].fetch_refs(h.req, &refs));
        }
        Some(finish(&mut self.pins[cache], h, v, up, fetched).expect("finish"))
    }
}

fn metas<'a>(
    values: impl IntoIterator<Item = (&'a Key, &'a MultiKeyCausal)>,
) -> BTreeMap<Key, ReadMeta> {
    values
        .into_iter()
        .map(|(k, v)| (k.clone(), ReadMeta::of(v)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn protocols_keep_their_guarantees(
        ops in prop::collection::vec(op(), 4..32),
        dag in (0..2usize, 1..32u8, 0..2usize, 1..32u8),
    ) {
        let mut w = World::new();
        for op in &ops {
            w.apply(op);
        }
        let (c1, m1, c2, m2) = dag;
        let (r1, r2) = (keys(m1), keys(m2));
        let rdag: KeySet = r1.union(&r2).cloned().collect();

        // OPT.
        if let Some(f1) = w.opt(c1, 2, &r1, &rdag, &Upstream::source()) {
            prop_assert!(contained_in(&f1.r_new, &f1.s_new));
            if let Some(f2) = w.opt(c2, 2, &r2, &rdag, &f1.downstream()) {
                prop_assert!(contained_in(&f2.r_new, &f2.s_new), "Thm 2: R_new ⊆ S_new");
                prop_assert!(w.store.log.koc_violations(&f2.s_new, &rdag).is_empty(), "S_new is a KOC");
                let both = f1.r_d.iter().chain(&f2.r_d);
                let reads = metas(both.clone());
                for (key, v) in both {
                    prop_assert_eq!(&v.clock(), &f2.r_new[key].clock, "repeatable read");
                }
                prop_assert!(check(&reads).is_clean(), "the reads are a snapshot");
                prop_assert!(w.store.log.koc_violations(&f2.r_new, &f2.r_new.keys().cloned().collect()).is_empty());
            }
        }
        for p in &mut w.pins {
            p.release(crate::ReqId(2));
        }

        // CON (and Thm 1 / Lemma 2 on its snapshots).
        for (c, r) in [(c1, &r1), (c2, &r2)] {
            let missing: KeySet = r.iter().filter(|k| !w.cuts[c].contains(k)).cloned().collect();
            w.stage(c, missing, 0);
        }
        let (h1, h2) = (w.at(c1, 1), w.at(c2, 1));
        let s1 = create_snapshot(&mut w.cuts[c1], &mut w.pins[c1], h1, &r1, &rdag).unwrap();
        let s2 = create_snapshot(&mut w.cuts[c2], &mut w.pins[c2], h2, &r2, &rdag).unwrap();
        prop_assert!(w.store.log.koc_violations(&s1, &rdag).is_empty());
        let s = union(&s1, &s2);
        prop_assert!(w.store.log.koc_violations(&s, &rdag).is_empty(), "Thm 1");
        // Lemma 2: the versions of a KOC are a strict snapshot.
        let mut values = BTreeMap::new();
        for (key, r) in &s {
            let mut v = MultiKeyCausal::default();
            for source in &r.sources {
                if let Some(p) = w.pins[source.0 as usize - 1].fetch(h1.req, key, &r.clock) {
                    lattice::Lattice::merge(&mut v, p);
                }
            }
            prop_assert_eq!(&v.clock(), &r.clock);
            values.insert(key.clone(), v);
        }
        prop_assert!(check(&metas(&values)).is_clean(), "Lemma 2");
        let plan = con::plan(&[(s1, r1.clone()), (s2, r2.clone())]);
        prop_assert_eq!(&plan.s, &s);
        let mut reads = BTreeMap::new();
        for (i, (c, h)) in [(c1, h1), (c2, h2)].into_iter().enumerate() {
            let part = &plan.parts[i];
            let mut fetched = Vec::new();
            for (source, refs) in crate::versionset::fetches_by_source(&part.remote, h.cache) {
                fetched.extend(w.pins[source.0 as usize - 1].fetch_refs(h.req, &refs));
            }
            let got = con::bind(&mut w.pins[c], h, part, fetched).unwrap();
            for (key, v) in &got {
                prop_assert_eq!(&v.clock(), &s[key].clock);
            }
            reads.extend(got);
        }
        prop_assert!(check(&metas(&reads)).is_clean(), "CON reads a snapshot");
        prop_assert!(contained_in(&restrict(&s, &rdag), &s));

        for cut in &w.cuts {
            prop_assert!(cut.check().is_ok());
        }
    }
}
