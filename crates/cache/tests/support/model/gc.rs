//! The model's dependency-metadata GC (`cache::gc`): rounds that sample the store and take
//! every cache's report, started at random points (also while a staging holds unmerged
//! answers), the mutations the tests must catch, and the checks against the log's
//! transitive truth that stay exact when dependency lists are pruned.

use std::collections::BTreeMap;

use cache::gc::{meet, Holdings, Round, Stable};
use cache::{Cut, Error, Key, Merged, Staging};
use lattice::VectorClock;

use super::{Gc, Model};
use crate::support::{stage, Rng, Store};

/// A GC round between its sample and its reports.
pub(super) struct Pending {
    round: Round,
    /// The sample, for the unclosed mutation.
    floor: BTreeMap<Key, VectorClock>,
    /// Reports taken at the sample (the early-report mutation).
    early: Option<Holdings>,
}

impl Model {
    /// With pruned dependencies Def. 3 over the values' own lists says less: checks every
    /// cut against everything its versions transitively depend on (the log's truth).
    pub(super) fn check_cuts_closed(&mut self) {
        if self.gc == Gc::Off {
            return;
        }
        let mut bad = 0;
        for i in 0..self.nodes.len() {
            let held: BTreeMap<Key, VectorClock> = self.nodes[i]
                .cut
                .keys()
                .map(|k| {
                    (
                        k.clone(),
                        self.nodes[i]
                            .cut
                            .get(k)
                            .map(|v| v.clock())
                            .unwrap_or_default(),
                    )
                })
                .collect();
            for (k, clock) in &held {
                for (d, c) in self.closure(k, clock) {
                    if held.get(&d).is_some_and(|have| !c.leq(have)) {
                        bad += 1;
                    }
                }
            }
        }
        self.expect(bad == 0, "every cut is transitively closed");
    }

    pub(super) fn closure(&mut self, k: &Key, clock: &VectorClock) -> BTreeMap<Key, VectorClock> {
        let log = &self.store.log;
        self.closures
            .entry((k.clone(), clock.clone()))
            .or_insert_with(|| log.closure_of(k, clock))
            .clone()
    }

    /// Under a GC mutation a broken property is counted as an anomaly; otherwise it fails.
    pub(super) fn expect(&mut self, ok: bool, what: &str) {
        if ok {
            return;
        }
        assert!(self.mutant(), "{what}");
        self.stats.anomalies += 1;
    }

    pub(super) fn mutant(&self) -> bool {
        !matches!(self.gc, Gc::Off | Gc::Sound)
    }

    /// Starts a GC round (samples the store) or ends the pending one (reports, `Stable`).
    pub(super) fn gc_step(&mut self) {
        if self.pending.is_some() {
            self.gc_end();
        } else {
            let early = (self.gc == Gc::EarlyReport).then(|| self.holdings_except(None));
            self.pending = Some(begin(&mut self.store, &mut self.rng, &self.stable, early));
        }
    }

    /// What every node holds (cuts and pins), except the cut of `skip`.
    fn holdings_except(&self, skip: Option<usize>) -> Holdings {
        let mut h = Holdings::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if Some(i) != skip {
                h.hold_all(&n.cut.holdings());
            }
            h.hold_all(&n.pins.holdings());
        }
        h
    }

    fn gc_end(&mut self) {
        let Some(p) = self.pending.take() else {
            return;
        };
        let holdings = p.early.unwrap_or_else(|| self.holdings_except(None));
        let stable = match self.gc {
            Gc::TooHigh => self.store.latest_clocks().into_iter().collect(),
            Gc::Unclosed => {
                let mut s = self.stable.clone();
                for (k, f) in &p.floor {
                    let c = holdings.get(k).map_or_else(|| f.clone(), |h| meet(f, h));
                    s.advance(k.clone(), &c);
                }
                s
            }
            _ => {
                let mut round = p.round;
                round.report(&holdings);
                round.finish()
            }
        };
        self.stats.gc_rounds += 1;
        self.stable.advance_all(&stable);
        // Each node learns it now or at a later round: an older `Stable` is still sound.
        for n in &mut self.nodes {
            if self.rng.chance(75) {
                self.stats.pruned += n.cut.advance_stable(&self.stable) as u64;
            }
        }
    }

    /// Drives a staging at node `n`; a GC round may take its sample between two rounds of
    /// answers (the race between a fetch and its report).
    pub(super) fn stage_at(&mut self, n: usize, s: Staging) -> Result<Merged, Error> {
        let gc = self.gc;
        let early = (gc == Gc::EarlyReport).then(|| self.holdings_except(Some(n)));
        let Model {
            nodes,
            store,
            rng,
            pending,
            stable,
            stats,
            ..
        } = self;
        let mut between = |cut: &Cut, store: &mut Store, rng: &mut Rng| {
            if gc == Gc::Off || pending.is_some() || !rng.chance(20) {
                return;
            }
            let early = early.clone().map(|mut h| {
                h.hold_all(&cut.holdings());
                h
            });
            *pending = Some(begin(store, rng, stable, early));
            stats.gc_mid_staging += 1;
        };
        stage(&mut nodes[n].cut, s, store, rng, &mut between)
    }
}

/// Samples the store for a GC round that extends `stable`.
fn begin(store: &mut Store, rng: &mut Rng, stable: &Stable, early: Option<Holdings>) -> Pending {
    let mut round = Round::new(stable);
    let mut floor = BTreeMap::new();
    for (k, v) in store.sample_floor(rng) {
        round.sample(&k, &v);
        floor.insert(k, v.clock());
    }
    Pending {
        round,
        floor,
        early,
    }
}
