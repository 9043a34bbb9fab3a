//! The scheduler's side of a DAG spread over hosts (protocol OPT). Pure: no I/O.
//!
//! A [`Spread`] follows one call through its attempts: which functions are ready (every
//! upstream done), where each runs, the results and edge metadata of the finished ones and
//! the writes they buffered (applied by the sink). The scheduler places each ready function
//! on its own host ([`crate::placement::Placement`]: load, then data locality), sends it
//! [`Spread::run_fn`], and feeds the hosts' answers to [`Spread::done`]. An abort (OPT's
//! validation failed) or a lost host ends the attempt: every host of it releases its pins,
//! and the DAG starts again under a fresh attempt id ([`Spread::restart`]), at most
//! [`MAX_OPT_ATTEMPTS`] times before the call falls back to CT on one host.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use cache::con::Part;
use cache::hb::{MetaView, Simulation};
use cache::versionset::{restrict, union_into};
use cache::{FnSpec, KeySet, VersionSet};

use crate::dag::Plan;
use crate::meta::{edge_from_pb, edge_to_pb};
use crate::pb;
use crate::placement::HostId;
use crate::reftable::{refs_from_table, refs_to_table};

/// OPT attempts of one call before it falls back to CT (the model test's bound, decision 6
/// of docs/serverless.md).
pub const MAX_OPT_ATTEMPTS: u32 = 4;

/// The pin id of attempt `n` of run `run_id`: the top bit set, so it never meets the run
/// ids CT pins under on the same host; 8 bits of attempt number.
pub fn attempt_id(run_id: u64, n: u32) -> u64 {
    1 << 63 | (run_id & ((1 << 55) - 1)) << 8 | u64::from(n & 0xff)
}

/// What a function's answer means for the call.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Not this attempt's, or not from where the function runs: ignore it.
    Stale,
    /// A function finished; place the ready ones.
    Progress,
    /// The sink finished: the call's result.
    Finished(Bytes),
    /// The attempt aborted: release it, then restart or fall back.
    Aborted(String),
    /// The call fails.
    Failed(pb::Error),
}

/// One call spread over hosts.
#[derive(Clone, Debug)]
pub struct Spread {
    run_id: u64,
    plan: Plan,
    attempt_no: u32,
    /// Functions placed and not answered yet, and their hosts.
    running: BTreeMap<String, HostId>,
    /// Finished functions: result and edge metadata.
    done: BTreeMap<String, (Bytes, pb::EdgeMeta)>,
    /// Every host this attempt placed a function on (they hold its pins).
    hosts: BTreeSet<HostId>,
    /// Functions sent (`RunFn`) in this attempt.
    sent: BTreeSet<String>,
    writes: Vec<pb::Write>,
    /// Protocol CON: the snapshot being built (`None`: OPT).
    con: Option<Con>,
    /// Protocol HB: the views being collected while OPT runs (`None` once the simulation
    /// is over, or under CON).
    hb: Option<Hb>,
    /// Each function's key references (`R̃_i`), for CON and HB.
    keys: BTreeMap<String, KeySet>,
    /// HB: this call falls back to CON, not to another OPT attempt, when OPT aborts.
    hb_call: bool,
    /// HB: what the OPT attempt's functions returned (result, edge metadata, writes), for
    /// reuse under CON ([`Spread::reuse`]).
    opt_results: BTreeMap<String, (Bytes, pb::EdgeMeta, Vec<pb::Write>)>,
    /// Functions whose OPT result this attempt reused.
    reused: BTreeSet<String>,
}

/// HB's query phase of one attempt, which runs beside OPT's first functions.
#[derive(Clone, Debug, Default)]
struct Hb {
    /// Where each function was placed and its cache queried (answers from elsewhere are
    /// stale); empty until the attempt's functions are placed.
    at: BTreeMap<String, HostId>,
    views: BTreeMap<String, MetaView>,
}

/// What a cache's HB view means for the call.
#[derive(Clone, Debug, PartialEq)]
pub enum HbEvent {
    /// Not this attempt's: ignore it.
    Stale,
    /// More views to come.
    Waiting,
    /// The simulation passed: OPT goes on on the hosts the views came from; the caches of
    /// these functions (not sent yet) may stage these keys from the store now (prefetch
    /// notices).
    Opt(Vec<(String, KeySet)>),
    /// The simulation aborted (early abort): stop OPT, run CON.
    EarlyAbort(String),
    /// The simulation aborted, but the sink was already sent: stopping OPT would save
    /// nothing, so it finishes (or aborts) on its own.
    TooLate(String),
}

/// CON's state of one attempt: every function is placed first, its cache answers `S_i`,
/// then [`cache::con::plan`] gives each function its part.
#[derive(Clone, Debug, Default)]
struct Con {
    /// The answers so far.
    snapshots: BTreeMap<String, VersionSet>,
    /// The plan, once every function answered.
    parts: Option<BTreeMap<String, Part>>,
}

/// What a cache's CON snapshot means for the call.
#[derive(Clone, Debug, PartialEq)]
pub enum ConEvent {
    /// Not this attempt's: ignore it.
    Stale,
    /// More snapshots to come.
    Waiting,
    /// Every function has its part: send the ready ones.
    Planned,
    /// The snapshot failed: the attempt aborts.
    Aborted(String),
}

impl Spread {
    /// The first attempt of run `run_id` of a validated DAG.
    pub fn new(run_id: u64, plan: Plan) -> Spread {
        Spread {
            run_id,
            plan,
            attempt_no: 0,
            running: BTreeMap::new(),
            done: BTreeMap::new(),
            hosts: BTreeSet::new(),
            sent: BTreeSet::new(),
            writes: Vec::new(),
            con: None,
            hb: None,
            keys: BTreeMap::new(),
            hb_call: false,
            opt_results: BTreeMap::new(),
            reused: BTreeSet::new(),
        }
    }

    /// The first attempt of run `run_id` under HB: every function placed first and its
    /// cache queried, OPT started at once on those hosts and simulated meanwhile (spec
    /// §4.4: *"starts the OPT subroutine and simultaneously performs a simulation"*);
    /// `keys` holds each function's key references.
    pub fn hb(run_id: u64, plan: Plan, keys: BTreeMap<String, KeySet>) -> Spread {
        let mut s = Spread::new(run_id, plan);
        s.keys = keys;
        s.hb = Some(Hb::default());
        s.hb_call = true;
        s
    }

    /// True for an HB call (whose OPT aborts go to CON).
    pub fn is_hb(&self) -> bool {
        self.hb_call
    }

    /// True under HB while no function has been placed in this attempt: place them all
    /// and query each one's cache (then send the ready ones: OPT does not wait).
    pub fn needs_query(&self) -> bool {
        self.hb.as_ref().is_some_and(|h| h.at.is_empty())
    }

    /// Runs the next attempts under CON (HB's fallback). Call after [`Spread::restart`].
    pub fn to_con(&mut self) {
        self.hb = None;
        self.con = Some(Con::default());
    }

    /// A cache's HB view for one function.
    pub fn hb_view(&mut self, from: &str, msg: pb::HbView) -> HbEvent {
        if msg.attempt != self.attempt() {
            return HbEvent::Stale;
        }
        let Some(hb) = self.hb.as_mut() else {
            return HbEvent::Stale;
        };
        if hb.at.get(&msg.function).map(String::as_str) != Some(from) {
            return HbEvent::Stale;
        }
        let view = match crate::meta::view_from_pb(msg.cache_id, msg.table.as_ref(), &msg.keys) {
            Ok(v) => v,
            Err(e) => return HbEvent::EarlyAbort(e.to_string()),
        };
        hb.views.insert(msg.function, view);
        if hb.views.len() < self.plan.order.len() {
            return HbEvent::Waiting;
        }
        let index: BTreeMap<&str, usize> = self
            .plan
            .order
            .iter()
            .enumerate()
            .map(|(i, f)| (f.as_str(), i))
            .collect();
        let fns: Vec<FnSpec> = self
            .plan
            .order
            .iter()
            .map(|f| FnSpec {
                reads: self.keys.get(f).cloned().unwrap_or_default(),
                parents: self.plan.upstream[f]
                    .iter()
                    .map(|u| index[u.as_str()])
                    .collect(),
            })
            .collect();
        let views: Vec<MetaView> = self
            .plan
            .order
            .iter()
            .filter_map(|f| hb.views.get(f).cloned())
            .collect();
        let outcome = match cache::Dag::new(fns) {
            Ok(dag) => cache::hb::simulate(&dag, &views),
            Err(e) => return HbEvent::EarlyAbort(e.to_string()),
        };
        self.hb = None;
        match outcome {
            Simulation::Ok { prefetch, .. } => HbEvent::Opt(
                self.plan
                    .order
                    .iter()
                    .zip(prefetch)
                    .filter(|(f, p)| {
                        !p.from_store.is_empty()
                            && !self.plan.upstream[*f].is_empty()
                            && !self.sent.contains(*f)
                    })
                    .map(|(f, p)| (f.clone(), p.from_store))
                    .collect(),
            ),
            Simulation::Abort { at, reason } => {
                let why = format!("simulated abort at {}: {reason}", self.plan.order[at]);
                if self.sent.contains(&self.plan.sink) {
                    HbEvent::TooLate(why)
                } else {
                    HbEvent::EarlyAbort(why)
                }
            }
        }
    }

    /// The first attempt of run `run_id` under CON; `keys` holds each function's key
    /// references.
    pub fn con(run_id: u64, plan: Plan, keys: BTreeMap<String, KeySet>) -> Spread {
        let mut s = Spread::new(run_id, plan);
        s.keys = keys;
        s.con = Some(Con::default());
        s
    }

    /// True under CON while no function has been placed in this attempt: place them all
    /// and send each its `ConPrepare`.
    pub fn needs_prepare(&self) -> bool {
        self.con.is_some() && self.running.is_empty() && self.sent.is_empty()
    }

    /// Every function of the DAG, in topological order.
    pub fn functions(&self) -> &[String] {
        &self.plan.order
    }

    /// CON and HB: `function` is placed on `host` before the DAG runs, to answer
    /// `ConPrepare` or `HbQuery` (and to run there).
    pub fn prepared(&mut self, function: &str, host: &str) {
        self.running.insert(function.to_string(), host.to_string());
        self.hosts.insert(host.to_string());
        if let Some(hb) = self.hb.as_mut() {
            hb.at.insert(function.to_string(), host.to_string());
        }
    }

    /// CON and HB: the host a function was placed on.
    pub fn host_of(&self, function: &str) -> Option<&str> {
        self.running.get(function).map(String::as_str)
    }

    /// A cache's CON snapshot for one function.
    pub fn con_snapshot(&mut self, from: &str, msg: pb::ConSnapshot) -> ConEvent {
        if msg.attempt != self.attempt()
            || self.running.get(&msg.function).map(String::as_str) != Some(from)
        {
            return ConEvent::Stale;
        }
        let Some(con) = self.con.as_mut() else {
            return ConEvent::Stale;
        };
        if !msg.error.is_empty() {
            return ConEvent::Aborted(msg.error);
        }
        let s = match refs_from_table(msg.s.as_ref().unwrap_or(&pb::RefTable::default())) {
            Ok(s) => s,
            Err(e) => return ConEvent::Aborted(e.to_string()),
        };
        con.snapshots.insert(msg.function, s);
        if con.snapshots.len() < self.plan.order.len() {
            return ConEvent::Waiting;
        }
        let order = &self.plan.order;
        let inputs: Vec<(VersionSet, KeySet)> = order
            .iter()
            .map(|f| {
                let keys = self.keys.get(f).cloned().unwrap_or_default();
                (con.snapshots.get(f).cloned().unwrap_or_default(), keys)
            })
            .collect();
        let planned = cache::con::plan(&inputs);
        con.parts = Some(order.iter().cloned().zip(planned.parts).collect());
        ConEvent::Planned
    }

    /// The current attempt's pin id.
    pub fn attempt(&self) -> u64 {
        attempt_id(self.run_id, self.attempt_no)
    }

    /// Attempts made so far, the current one included.
    pub fn attempts(&self) -> u32 {
        self.attempt_no + 1
    }

    /// Functions ready to be sent: not sent, every upstream done (under CON, once the plan
    /// is made; under HB, once every function is placed, without waiting for the
    /// simulation).
    pub fn ready(&self) -> Vec<String> {
        if self.con.as_ref().is_some_and(|c| c.parts.is_none()) || self.needs_query() {
            return Vec::new();
        }
        self.plan
            .order
            .iter()
            .filter(|f| !self.sent.contains(*f) && !self.done.contains_key(*f))
            .filter(|f| {
                self.plan.upstream[*f]
                    .iter()
                    .all(|u| self.done.contains_key(u))
            })
            .cloned()
            .collect()
    }

    /// `function` was sent to `host`.
    pub fn placed(&mut self, function: &str, host: &str) {
        self.running.insert(function.to_string(), host.to_string());
        self.hosts.insert(host.to_string());
        self.sent.insert(function.to_string());
    }

    /// Functions running now, and their hosts.
    pub fn running(&self) -> &BTreeMap<String, HostId> {
        &self.running
    }

    /// Every host of the attempt.
    pub fn hosts(&self) -> &BTreeSet<HostId> {
        &self.hosts
    }

    /// The message running `function` (ready) under the current attempt. `run` is the
    /// call (code and arguments), `rdag` its key references, `peers` the known caches.
    pub fn run_fn(
        &self,
        function: &str,
        run: &pb::RunDag,
        rdag: &[Bytes],
        peers: &[pb::CachePeer],
    ) -> pb::RunFn {
        let ups = &self.plan.upstream[function];
        let sink = function == self.plan.sink;
        let part = self
            .con
            .as_ref()
            .and_then(|c| c.parts.as_ref())
            .and_then(|p| p.get(function));
        pb::RunFn {
            con: part.is_some(),
            con_reads: part.map(|p| refs_to_table(&p.reads)),
            con_remote: part.map(|p| refs_to_table(&p.remote)),
            run_id: self.run_id,
            attempt: self.attempt(),
            function: function.to_string(),
            code: run.code.get(function).cloned().unwrap_or_default(),
            args: run.args.get(function).cloned(),
            upstream: ups.iter().map(|u| self.done[u].0.clone()).collect(),
            upstream_meta: ups.iter().map(|u| self.done[u].1.clone()).collect(),
            rdag: rdag.to_vec(),
            sink,
            writes: if sink {
                self.writes.clone()
            } else {
                Vec::new()
            },
            peers: peers.to_vec(),
            timeout_ms: run.timeout_ms,
            commit_marker: if sink {
                run.commit_marker.clone()
            } else {
                String::new()
            },
        }
    }

    /// A host's answer for a function.
    pub fn done(&mut self, from: &str, msg: pb::FnDone) -> Event {
        if msg.attempt != self.attempt()
            || self.running.get(&msg.function).map(String::as_str) != Some(from)
        {
            return Event::Stale;
        }
        self.running.remove(&msg.function);
        match msg.result {
            Some(pb::fn_done::Result::Value(v)) => {
                if msg.function == self.plan.sink {
                    return Event::Finished(v);
                }
                let meta = msg.meta.unwrap_or_default();
                if self.hb_call && self.con.is_none() {
                    let kept = (v.clone(), meta.clone(), msg.writes.clone());
                    self.opt_results.insert(msg.function.clone(), kept);
                }
                self.writes.extend(msg.writes);
                self.done.insert(msg.function, (v, meta));
                Event::Progress
            }
            Some(pb::fn_done::Result::Abort(why)) => Event::Aborted(why),
            Some(pb::fn_done::Result::Error(e)) => Event::Failed(e),
            None => Event::Failed(crate::error::pb_error(
                pb::ErrorCode::Unavailable,
                "the host sent an empty result",
            )),
        }
    }

    /// HB's function-result reuse (P:396): under CON after an OPT abort, a ready function
    /// other than the sink whose upstream functions were all reused (or which has none),
    /// and whose OPT run read exactly the versions CON binds for it (`hb::reuse`), takes its
    /// OPT result, writes and outgoing metadata instead of running again (functions are
    /// taken to be deterministic in their inputs, as in the paper). Returns the host it was
    /// placed on (its load ends there), `None` if it must run.
    pub fn reuse(&mut self, f: &str) -> Option<HostId> {
        if !self.hb_call || f == self.plan.sink {
            return None;
        }
        let part = self.con.as_ref()?.parts.as_ref()?.get(f)?.clone();
        let ups = &self.plan.upstream[f];
        if !ups.iter().all(|u| self.reused.contains(u)) {
            return None;
        }
        let (value, meta, writes) = self.opt_results.get(f)?.clone();
        let opt_reads = restrict(&edge_from_pb(&meta).ok()?.r, self.keys.get(f)?);
        if !cache::hb::reuse(&opt_reads, &part.reads) {
            return None;
        }
        // The edge CON itself would send: the upstream reads and this function's.
        let mut r = part.reads;
        for u in ups {
            union_into(&mut r, &edge_from_pb(&self.done.get(u)?.1).ok()?.r);
        }
        let meta = edge_to_pb(&cache::opt::Upstream {
            abort: false,
            s: r.clone(),
            r,
        });
        self.writes.extend(writes);
        self.done.insert(f.to_string(), (value, meta));
        self.reused.insert(f.to_string());
        self.sent.insert(f.to_string());
        // Under CON every function was placed before the DAG started.
        Some(self.running.remove(f).unwrap_or_default())
    }

    /// Functions whose OPT result this attempt reused.
    pub fn reused(&self) -> usize {
        self.reused.len()
    }

    /// Starts the next attempt from scratch; returns the hosts whose pins of the ended
    /// attempt must be released, and the functions that were still running there.
    pub fn restart(&mut self) -> (u64, BTreeSet<HostId>, BTreeMap<String, HostId>) {
        let ended = self.attempt();
        self.attempt_no += 1;
        self.done.clear();
        self.writes.clear();
        self.sent.clear();
        self.reused.clear();
        if let Some(con) = self.con.as_mut() {
            con.snapshots.clear();
            con.parts = None;
        }
        if let Some(hb) = self.hb.as_mut() {
            hb.views.clear();
            hb.at.clear();
        }
        (
            ended,
            std::mem::take(&mut self.hosts),
            std::mem::take(&mut self.running),
        )
    }
}

/// Function `f`'s key references in a call.
pub fn fn_keys(run: &pb::RunDag, f: &str) -> Vec<Bytes> {
    run.args
        .get(f)
        .into_iter()
        .flat_map(|a| a.args.iter())
        .filter_map(|a| match &a.kind {
            Some(pb::arg::Kind::KeyRef(k)) => Some(k.clone()),
            _ => None,
        })
        .collect()
}

/// Each function's key references in a call, as keysets (`R̃_i` of CON and HB).
pub fn dag_msg_keys(
    args: &std::collections::BTreeMap<String, pb::Args>,
    plan: &crate::dag::Plan,
) -> std::collections::BTreeMap<String, cache::KeySet> {
    plan.order
        .iter()
        .map(|f| {
            let keys = args
                .get(f)
                .into_iter()
                .flat_map(|a| a.args.iter())
                .filter_map(|a| match &a.kind {
                    Some(pb::arg::Kind::KeyRef(k)) => Some(cache::Key::from(&k[..])),
                    _ => None,
                })
                .collect();
            (f.clone(), keys)
        })
        .collect()
}

#[cfg(test)]
#[path = "distributed_tests.rs"]
mod tests;
