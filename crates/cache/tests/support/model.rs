//! The model: 2–3 compute nodes (a cache and an executor each) over one lagging store,
//! running random linear and V-shaped DAGs under CT, OPT (with retries), CON and HB — or,
//! for contrast, with caching but no MTCC — interleaved with refreshes, evictions, late
//! puts, dead sinks and nested writers. Every committed request's reads go through the
//! anomaly checker; every cut is checked after every event.

use std::collections::BTreeMap;

use cache::checker::{check, ReadMeta};
use cache::gc::Stable;
use cache::hb::{self, Simulation};
use cache::opt::{finish, parallel_flow, plan, validate, Finished, Upstream, Validated};
use cache::snapshot::{create_snapshot, ct_snapshot};
use cache::versionset::{contained_in, fetches_by_source, refs_of, restrict};
use cache::{
    con, CacheId, Cut, Dag, Error, Executor, Here, Key, KeySet, Merged, MultiKeyCausal, PinLimits,
    Pins, ReqId, Staging, VersionSet,
};
use lattice::{CausalVersion, Lattice, VectorClock};

use super::{Rng, Store};

mod gc;

use gc::Pending;

const KEYS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

/// How a request runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Ct,
    Opt,
    Con,
    Hb,
    /// Caching without MTCC: each function reads its own cache's cut.
    NoMtcc,
}

/// Dependency-metadata GC in the model (`cache::gc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gc {
    /// No GC.
    Off,
    /// Rounds as built: sample the store, then every cache reports once the stagings it
    /// began before the sample have ended; the result is closed.
    Sound,
    /// Mutation: `Stable` is the store's latest clock (too high: caches hold older copies).
    TooHigh,
    /// Mutation: a cache reports at the sample, while a staging holds versions fetched
    /// before it (the race the report-epoch rule closes).
    EarlyReport,
    /// Mutation: the design's first rule, `Stable` below every holder but not closed.
    Unclosed,
}

/// What happened over a run.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub committed: BTreeMap<&'static str, u64>,
    pub opt_aborts: u64,
    pub con_fallbacks: u64,
    pub hb_sim_aborts: u64,
    pub hb_divergences: u64,
    pub data_fetches: u64,
    pub repaired: u64,
    pub fell_back: u64,
    pub evicted: u64,
    pub refused: u64,
    pub dead_sinks: u64,
    pub expired: u64,
    pub anomalies: u64,
    pub atomic: u64,
    pub gc_rounds: u64,
    /// Rounds whose sample was taken while a staging held unmerged answers.
    pub gc_mid_staging: u64,
    /// Cut values pruned when a node learnt a newer `Stable`.
    pub pruned: u64,
    /// Dependencies dropped by writers at commit.
    pub pruned_at_commit: u64,
    /// The largest dependency list stored, over the run.
    pub max_deps: usize,
}

struct Node {
    id: CacheId,
    cut: Cut,
    pins: Pins,
    exec: Executor,
}

/// One request: its DAG, where each function runs, what the sink writes.
struct Request {
    dag: Dag,
    at: Vec<usize>,
    writes: Vec<Key>,
    protocol: Protocol,
}

/// A request attempt that can commit.
struct Done {
    rid: ReqId,
    /// Every version any function read.
    reads: BTreeMap<Key, MultiKeyCausal>,
    /// The read set as the sink sees it (`R_new`).
    refs: VersionSet,
}

type Reads = BTreeMap<Key, MultiKeyCausal>;

pub struct Model {
    rng: Rng,
    store: Store,
    nodes: Vec<Node>,
    next_req: u64,
    now_ms: u64,
    mtcc: bool,
    gc: Gc,
    /// The last `Stable` computed (every node learns it, or a later one, eventually).
    stable: Stable,
    /// A GC round whose sample was taken and whose reports are not in yet.
    pending: Option<Pending>,
    /// `VersionLog::closure_of`, memoised: a clock that exists has every version below it
    /// logged already (a later commit carries a fresh counter), so its closure is final.
    closures: BTreeMap<(Key, VectorClock), BTreeMap<Key, VectorClock>>,
    pub stats: Stats,
}

impl Model {
    pub fn new(seed: u64, nodes: usize, mtcc: bool) -> Self {
        Model::with_gc(seed, nodes, mtcc, Gc::Off)
    }

    pub fn with_gc(seed: u64, nodes: usize, mtcc: bool, gc: Gc) -> Self {
        // Node 1's cut is small: eviction to make room, and refusals.
        let capacity = |i: usize| if i == 1 { 4_000 } else { 1 << 20 };
        Model {
            rng: Rng::new(seed),
            store: Store::default(),
            nodes: (0..nodes)
                .map(|i| Node {
                    id: CacheId(i as u64),
                    cut: Cut::new(capacity(i)),
                    pins: Pins::new(PinLimits::default()),
                    // Node 2's executor rotates often (a latest table smaller than the keyspace).
                    exec: Executor::new(i as u32 + 1, if i == 2 { 3 } else { 16 }),
                })
                .collect(),
            next_req: 1,
            now_ms: 0,
            mtcc,
            gc,
            stable: Stable::new(),
            pending: None,
            closures: BTreeMap::new(),
            stats: Stats::default(),
        }
    }

    /// Runs `steps` top-level events, then lets every deadline pass and checks that no pin
    /// is left behind.
    pub fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            self.now_ms += 1 + self.rng.below(50) as u64;
            if self.gc != Gc::Off && self.rng.chance(15) {
                self.gc_step();
            }
            match self.rng.below(10) {
                0..=4 => self.request(false),
                5 | 6 => self.push(),
                7 => self.evict(),
                8 => self.store.flush(),
                _ => {
                    for n in &mut self.nodes {
                        self.stats.expired += n.pins.expire(self.now_ms).len() as u64;
                    }
                }
            }
            self.check_cuts();
        }
        self.now_ms += 1 << 40;
        for n in &mut self.nodes {
            self.stats.expired += n.pins.expire(self.now_ms).len() as u64;
            assert_eq!((n.pins.versions(), n.pins.bytes()), (0, 0), "pins leaked");
        }
    }

    fn check_cuts(&mut self) {
        for n in &self.nodes {
            if let Err(e) = n.cut.check() {
                panic!("cut of {} broken: {e}", n.id);
            }
        }
        self.check_cuts_closed();
    }

    /// An event between two functions of a request.
    fn background(&mut self) {
        if self.gc != Gc::Off && self.rng.chance(15) {
            self.gc_step();
        }
        match self.rng.below(10) {
            0 | 1 => self.push(),
            2 => self.evict(),
            3 => self.store.flush(),
            4 => self.request(true),
            _ => {}
        }
        self.check_cuts();
    }

    /// The store pushes a (possibly lagging) version of a cached key to a cache.
    fn push(&mut self) {
        let n = self.rng.below(self.nodes.len());
        let cached: Vec<Key> = self.nodes[n].cut.keys().cloned().collect();
        if cached.is_empty() {
            return;
        }
        let key = cached[self.rng.below(cached.len())].clone();
        let Some(value) = self.store.get(&key, 0, &mut self.rng) else {
            return;
        };
        match Staging::for_pushed([(key, value)], &self.nodes[n].cut) {
            Ok(s) => {
                let r = self.stage_at(n, s);
                self.count(r);
            }
            Err(_) => self.stats.refused += 1,
        }
    }

    fn evict(&mut self) {
        let n = self.rng.below(self.nodes.len());
        let cached: Vec<Key> = self.nodes[n].cut.keys().cloned().collect();
        if !cached.is_empty() {
            let key = &cached[self.rng.below(cached.len())];
            self.stats.evicted += self.nodes[n].cut.evict(key).len() as u64;
        }
    }

    fn count(&mut self, r: Result<Merged, Error>) -> bool {
        match r {
            Ok(m) => {
                self.stats.evicted += m.evicted.len() as u64;
                true
            }
            Err(Error::WouldExceedCapacity { .. }) => {
                self.stats.refused += 1;
                false
            }
            Err(e) => panic!("staging: {e}"),
        }
    }

    /// Stages the keys of `keys` node `n` does not hold; false if the cut is too small.
    fn stage_missing(&mut self, n: usize, keys: &KeySet) -> bool {
        let cut = &self.nodes[n].cut;
        let missing: Vec<Key> = keys.iter().filter(|k| !cut.contains(k)).cloned().collect();
        if missing.is_empty() {
            return true;
        }
        let s = Staging::for_keys(missing, cut);
        let r = self.stage_at(n, s);
        self.count(r)
    }

    fn here(&self, n: usize, rid: ReqId) -> Here {
        Here {
            cache: self.nodes[n].id,
            req: rid,
            deadline_ms: self.now_ms + 5_000,
        }
    }

    fn fresh(&mut self) -> ReqId {
        self.next_req += 1;
        ReqId(self.next_req)
    }

    fn release(&mut self, rid: ReqId) {
        for n in &mut self.nodes {
            n.pins.release(rid);
        }
    }

    fn keyset(&mut self, min: usize, max: usize) -> KeySet {
        let n = min + self.rng.below(max - min + 1);
        (0..n)
            .map(|_| Key::from(KEYS[self.rng.below(KEYS.len())].as_bytes()))
            .collect()
    }

    fn random_request(&mut self, nested: bool) -> Request {
        let dag = if nested {
            Dag::linear(vec![self.keyset(1, 2)])
        } else if self.rng.chance(30) {
            Dag::fan_in(
                vec![self.keyset(1, 2), self.keyset(1, 2)],
                self.keyset(0, 1),
            )
        } else {
            let len = 1 + self.rng.below(3);
            Dag::linear((0..len).map(|_| self.keyset(1, 2)).collect())
        };
        let at = (0..dag.fns().len())
            .map(|_| self.rng.below(self.nodes.len()))
            .collect();
        let rdag: Vec<Key> = dag.rdag().into_iter().collect();
        let mut writes: KeySet = (0..1 + self.rng.below(2))
            .map(|_| rdag[self.rng.below(rdag.len())].clone())
            .collect();
        if self.rng.chance(20) {
            writes.extend(self.keyset(1, 1));
        }
        let protocol = if !self.mtcc {
            Protocol::NoMtcc
        } else if nested {
            Protocol::Ct
        } else {
            [Protocol::Ct, Protocol::Opt, Protocol::Con, Protocol::Hb][self.rng.below(4)]
        };
        Request {
            dag,
            at,
            writes: writes.into_iter().collect(),
            protocol,
        }
    }

    fn request(&mut self, nested: bool) {
        let r = self.random_request(nested);
        let done = match r.protocol {
            Protocol::Ct => self.ct(&r, nested),
            Protocol::Opt => self.opt(&r),
            Protocol::Con => self.con(&r),
            Protocol::Hb => self.hb(&r),
            Protocol::NoMtcc => self.no_mtcc(&r),
        };
        if let Some(done) = done {
            self.commit(&r, done);
        }
    }

    fn ct(&mut self, r: &Request, nested: bool) -> Option<Done> {
        let rid = self.fresh();
        let n = r.at[0];
        let rdag = r.dag.rdag();
        if !self.stage_missing(n, &rdag) {
            return None;
        }
        let here = self.here(n, rid);
        let node = &mut self.nodes[n];
        let reads = ct_snapshot(&mut node.cut, &mut node.pins, here, &rdag).ok()?;
        if !nested {
            self.background(); // the functions run now; the pinned snapshot does not move
        }
        let refs = refs_of(&reads, here.cache);
        Some(Done { rid, reads, refs })
    }

    fn opt(&mut self, r: &Request) -> Option<Done> {
        for _ in 0..4 {
            let rid = self.fresh();
            if let Some(done) = self.opt_attempt(r, rid) {
                return Some(done);
            }
            self.release(rid);
            self.stats.opt_aborts += 1;
        }
        self.stats.con_fallbacks += 1;
        self.con(r)
    }

    /// One OPT attempt over the whole DAG; `None` on abort.
    fn opt_attempt(&mut self, r: &Request, rid: ReqId) -> Option<Done> {
        let rdag = r.dag.rdag();
        let mut outs: Vec<Finished> = Vec::new();
        for (i, f) in r.dag.fns().iter().enumerate() {
            self.background();
            let n = r.at[i];
            let up = match f.parents.as_slice() {
                [] => Upstream::source(),
                [p] => outs[*p].downstream(),
                ps => {
                    let inputs: Vec<Upstream> = ps.iter().map(|&p| outs[p].downstream()).collect();
                    parallel_flow(&inputs).ok()?
                }
            };
            let here = self.here(n, rid);
            let mut v = None;
            for _ in 0..3 {
                let p = plan(&self.nodes[n].cut, &f.reads, &up);
                if !self.stage_missing(n, &p.from_store) {
                    return None;
                }
                let node = &mut self.nodes[n];
                match validate(&mut node.cut, &mut node.pins, here, &f.reads, &rdag, &up) {
                    Ok(Validated::Valid(ok)) => {
                        v = Some(ok);
                        break;
                    }
                    Ok(Validated::Abort(_)) => return None,
                    Err(Error::NotCached { .. }) => continue,
                    Err(e) => panic!("validate: {e}"),
                }
            }
            let v = v?;
            self.stats.repaired += v.repaired.len() as u64;
            self.stats.fell_back += v.fell_back.len() as u64;
            self.stats.data_fetches += u64::from(!v.is_metadata_only());
            let mut fetched = Vec::new();
            for (source, refs) in v.fetches(here.cache) {
                fetched.extend(self.nodes[source.0 as usize].pins.fetch_refs(rid, &refs));
            }
            let node = &mut self.nodes[n];
            let done = finish(&mut node.pins, here, v, &up, fetched).expect("finish");
            self.expect(contained_in(&done.r_new, &done.s_new), "Thm 2");
            outs.push(done);
        }
        let sink = outs.last()?;
        let koc = self.store.log.koc_violations(&sink.s_new, &rdag).is_empty();
        self.expect(koc, "S_new is a KOC");
        let mut reads = Reads::new();
        for out in &outs {
            self.add_reads(&mut reads, &out.r_d);
        }
        Some(Done {
            rid,
            reads,
            refs: sink.r_new.clone(),
        })
    }

    fn con(&mut self, r: &Request) -> Option<Done> {
        let rid = self.fresh();
        let rdag = r.dag.rdag();
        let mut snaps = Vec::new();
        for (i, f) in r.dag.fns().iter().enumerate() {
            let n = r.at[i];
            if !self.stage_missing(n, &f.reads) {
                self.release(rid);
                return None;
            }
            let here = self.here(n, rid);
            let node = &mut self.nodes[n];
            let s_i = create_snapshot(&mut node.cut, &mut node.pins, here, &f.reads, &rdag)
                .expect("CreateSnapshot right after staging");
            snaps.push((s_i, f.reads.clone()));
        }
        let plan = con::plan(&snaps);
        let mut reads = Reads::new();
        for (i, part) in plan.parts.iter().enumerate() {
            let n = r.at[i];
            let here = self.here(n, rid);
            let mut fetched = Vec::new();
            for (source, refs) in fetches_by_source(&part.remote, here.cache) {
                fetched.extend(self.nodes[source.0 as usize].pins.fetch_refs(rid, &refs));
            }
            let got = con::bind(&mut self.nodes[n].pins, here, part, fetched).expect("bind");
            self.add_reads(&mut reads, &got);
        }
        self.background(); // the DAG runs on pinned reads
        Some(Done {
            rid,
            reads,
            refs: restrict(&plan.s, &rdag),
        })
    }

    fn hb(&mut self, r: &Request) -> Option<Done> {
        let rdag = r.dag.rdag();
        let views: Vec<hb::MetaView> = r
            .dag
            .fns()
            .iter()
            .zip(&r.at)
            .map(|(f, &n)| hb::view(&self.nodes[n].cut, self.nodes[n].id, &f.reads, &rdag))
            .collect();
        match hb::simulate(&r.dag, &views) {
            Simulation::Ok { prefetch, .. } => {
                for (p, &n) in prefetch.iter().zip(&r.at) {
                    self.stage_missing(n, &p.from_store);
                }
                let rid = self.fresh();
                if let Some(done) = self.opt_attempt(r, rid) {
                    return Some(done);
                }
                self.release(rid);
                self.stats.hb_divergences += 1;
            }
            Simulation::Abort { .. } => self.stats.hb_sim_aborts += 1,
        }
        self.con(r)
    }

    fn no_mtcc(&mut self, r: &Request) -> Option<Done> {
        let rid = self.fresh();
        let mut reads = Reads::new();
        for (i, f) in r.dag.fns().iter().enumerate() {
            self.background();
            let n = r.at[i];
            if !self.stage_missing(n, &f.reads) {
                return None;
            }
            for k in &f.reads {
                let v = self.nodes[n].cut.read(k).cloned().unwrap_or_default();
                reads.entry(k.clone()).or_insert(v);
            }
        }
        let refs = refs_of(&reads, CacheId(0));
        Some(Done { rid, reads, refs })
    }

    /// Adds one function's reads, checking repeatable read under MTCC.
    fn add_reads(&mut self, into: &mut Reads, more: &Reads) {
        for (k, v) in more {
            if let Some(seen) = into.get(k) {
                let same = seen.clock() == v.clock();
                self.expect(!self.mtcc || same, "repeatable read");
            } else {
                into.insert(k.clone(), v.clone());
            }
        }
    }

    /// The sink's commit, the puts, and the checks of the request's reads.
    fn commit(&mut self, r: &Request, d: Done) {
        // The full read versions of written keys, fetched from the pins R_new names (I2).
        let mut bases = Reads::new();
        for k in &r.writes {
            let Some(rf) = d.refs.get(k).filter(|rf| !rf.is_bottom()) else {
                continue;
            };
            let base = if r.protocol == Protocol::NoMtcc {
                d.reads[k].clone()
            } else {
                let mut v = MultiKeyCausal::default();
                for s in &rf.sources {
                    if let Some(p) = self.nodes[s.0 as usize].pins.fetch(d.rid, k, &rf.clock) {
                        v.merge(p);
                    }
                }
                assert_eq!(
                    v.clock(),
                    rf.clock,
                    "the pinned read version of a written key"
                );
                v
            };
            bases.insert(k.clone(), base);
        }
        let writes = r
            .writes
            .iter()
            .map(|k| {
                (
                    k.clone(),
                    Key::from(format!("{}@{}", d.rid.0, cache_show(k)).as_bytes()),
                )
            })
            .collect();
        let sink = r.at[r.dag.sink()];
        let node = &mut self.nodes[sink];
        let out = node
            .exec
            .commit_pruned(writes, &d.refs, &bases, node.cut.stable())
            .expect("commit");
        // The log gets each version with its dependencies before pruning: what it read, the
        // other writes; inherited ones come from the versions below it in the log (I2).
        let written: BTreeMap<Key, VectorClock> =
            out.iter().map(|(k, v)| (k.clone(), v.clock())).collect();
        for (k, v) in &out {
            if let Some(rf) = d.refs.get(k) {
                assert!(v.clock().dominates(&rf.clock), "I1");
            }
            let mut direct: BTreeMap<Key, VectorClock> = d
                .refs
                .iter()
                .filter(|(_, rf)| !rf.is_bottom())
                .map(|(dk, rf)| (dk.clone(), rf.clock.clone()))
                .chain(written.iter().map(|(wk, c)| (wk.clone(), c.clone())))
                .collect();
            direct.remove(k);
            let stored = v.deps();
            self.stats.pruned_at_commit +=
                direct.keys().filter(|dk| !stored.contains_key(*dk)).count() as u64;
            self.stats.max_deps = self.stats.max_deps.max(stored.len());
            let logged =
                MultiKeyCausal::from_versions(v.versions().iter().map(|ver| CausalVersion {
                    clock: ver.clock.clone(),
                    deps: direct.clone(),
                    value: ver.value.clone(),
                }));
            self.store.log.record(k, &logged);
            let later = self.rng.chance(25);
            self.store.put(k, v, later);
        }
        let metas: BTreeMap<Key, ReadMeta> = d
            .reads
            .iter()
            .map(|(k, v)| (k.clone(), ReadMeta::of(v)))
            .collect();
        let report = check(&metas);
        let found = (report.strict.len() + report.causal.len() + report.atomic.len()) as u64;
        self.stats.anomalies += found;
        self.stats.atomic += report.atomic.len() as u64;
        if self.mtcc {
            assert!(
                self.mutant() || report.is_clean(),
                "{:?} read a non-snapshot: {report:?}",
                r.protocol
            );
            let refs = refs_of(&d.reads, CacheId(0));
            let keys: KeySet = refs.keys().cloned().collect();
            let koc = self.store.log.koc_violations(&refs, &keys).is_empty();
            self.expect(koc, "the read set is a KOC");
            // The same check against everything each read version transitively depends on
            // (the log's truth): pruned dependency lists cannot hide a violation from it.
            let mut truth: BTreeMap<Key, ReadMeta> = BTreeMap::new();
            for (k, v) in &d.reads {
                let clock = v.clock();
                let deps = self.closure(k, &clock);
                truth.insert(k.clone(), ReadMeta { clock, deps });
            }
            let deep = check(&truth);
            self.expect(
                deep.is_clean(),
                "the read set is a snapshot of the whole history",
            );
        }
        *self.stats.committed.entry(name(r.protocol)).or_default() += 1;
        if self.rng.chance(5) {
            self.stats.dead_sinks += 1; // its pins go by deadline
        } else {
            self.release(d.rid);
        }
    }
}

fn name(p: Protocol) -> &'static str {
    match p {
        Protocol::Ct => "CT",
        Protocol::Opt => "OPT",
        Protocol::Con => "CON",
        Protocol::Hb => "HB",
        Protocol::NoMtcc => "none",
    }
}

fn cache_show(k: &[u8]) -> String {
    String::from_utf8_lossy(k).into_owned()
}
