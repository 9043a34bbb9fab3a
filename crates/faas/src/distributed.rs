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

use crate::dag::Plan;
use crate::pb;
use crate::placement::HostId;

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
    writes: Vec<pb::Write>,
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
            writes: Vec::new(),
        }
    }

    /// The current attempt's pin id.
    pub fn attempt(&self) -> u64 {
        attempt_id(self.run_id, self.attempt_no)
    }

    /// Attempts made so far, the current one included.
    pub fn attempts(&self) -> u32 {
        self.attempt_no + 1
    }

    /// Functions ready to be placed: not started, every upstream done.
    pub fn ready(&self) -> Vec<String> {
        self.plan
            .order
            .iter()
            .filter(|f| !self.running.contains_key(*f) && !self.done.contains_key(*f))
            .filter(|f| {
                self.plan.upstream[*f]
                    .iter()
                    .all(|u| self.done.contains_key(u))
            })
            .cloned()
            .collect()
    }

    /// `function` was placed on `host`.
    pub fn placed(&mut self, function: &str, host: &str) {
        self.running.insert(function.to_string(), host.to_string());
        self.hosts.insert(host.to_string());
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
        pb::RunFn {
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
                self.writes.extend(msg.writes);
                self.done
                    .insert(msg.function, (v, msg.meta.unwrap_or_default()));
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

    /// Starts the next attempt from scratch; returns the hosts whose pins of the ended
    /// attempt must be released, and the functions that were still running there.
    pub fn restart(&mut self) -> (u64, BTreeSet<HostId>, BTreeMap<String, HostId>) {
        let ended = self.attempt();
        self.attempt_no += 1;
        self.done.clear();
        self.writes.clear();
        (
            ended,
            std::mem::take(&mut self.hosts),
            std::mem::take(&mut self.running),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vee() -> Plan {
        crate::dag::validate(&pb::Dag {
            name: "v".into(),
            functions: vec!["a".into(), "b".into(), "c".into()],
            edges: vec![
                pb::Edge {
                    from: "a".into(),
                    to: "c".into(),
                },
                pb::Edge {
                    from: "b".into(),
                    to: "c".into(),
                },
            ],
        })
        .unwrap()
    }

    fn done(s: &Spread, f: &str, value: &str, writes: &[&str]) -> pb::FnDone {
        pb::FnDone {
            run_id: 1,
            attempt: s.attempt(),
            function: f.into(),
            result: Some(pb::fn_done::Result::Value(Bytes::from(value.to_string()))),
            meta: Some(pb::EdgeMeta::default()),
            writes: writes
                .iter()
                .map(|k| pb::Write {
                    key: Bytes::from(k.to_string()),
                    value: Bytes::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_fan_in_runs_after_both_branches_with_their_results_and_writes() {
        let mut s = Spread::new(1, vee());
        assert_eq!(s.ready(), vec!["a", "b"]);
        s.placed("a", "h1");
        s.placed("b", "h2");
        assert!(s.ready().is_empty());
        assert_eq!(s.done("h2", done(&s, "a", "x", &[])), Event::Stale); // not a's host
        assert_eq!(s.done("h1", done(&s, "a", "ra", &["k1"])), Event::Progress);
        assert!(s.ready().is_empty());
        assert_eq!(s.done("h2", done(&s, "b", "rb", &["k2"])), Event::Progress);
        assert_eq!(s.ready(), vec!["c"]);
        let m = s.run_fn("c", &pb::RunDag::default(), &[], &[]);
        assert!(m.sink);
        assert_eq!(m.upstream, vec![Bytes::from("ra"), Bytes::from("rb")]);
        assert_eq!(m.writes.len(), 2);
        s.placed("c", "h1");
        assert_eq!(
            s.done("h1", done(&s, "c", "rc", &[])),
            Event::Finished(Bytes::from("rc"))
        );
    }

    #[test]
    fn a_restart_takes_a_fresh_attempt_and_forgets_the_old_one() {
        let mut s = Spread::new(7, vee());
        s.placed("a", "h1");
        let old = done(&s, "a", "ra", &["k"]);
        let first = s.attempt();
        let (ended, hosts, running) = s.restart();
        assert_eq!(ended, first);
        assert_ne!(s.attempt(), first);
        assert_eq!(hosts, BTreeSet::from(["h1".to_string()]));
        assert_eq!(running.len(), 1);
        assert_eq!(s.attempts(), 2);
        assert_eq!(s.done("h1", old), Event::Stale);
        assert_eq!(s.ready(), vec!["a", "b"]);
        // CT pins under run ids; attempts never collide with them or each other.
        assert!(attempt_id(7, 0) > u64::from(u32::MAX) && attempt_id(7, 0) != attempt_id(7, 1));
    }
}
