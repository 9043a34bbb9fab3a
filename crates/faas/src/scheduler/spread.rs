//! The scheduler's side of DAGs spread over hosts (OPT, CON, HB): placing each function,
//! passing results and metadata along the edges, CON's preparation and HB's queries,
//! aborts, retries and releases. The decisions are [`crate::distributed::Spread`]'s; this
//! is the part that touches the scheduler's state and sends messages.

use super::{Outbox, State};
use crate::distributed::{fn_keys, ConEvent, Event, HbEvent, Spread, MAX_OPT_ATTEMPTS};
use crate::error::pb_error;
use crate::pb;
use prost::Message;

impl State {
    /// Places every ready function of spread run `id` on a host and sends it.
    pub(super) fn dispatch_spread(&mut self, id: u64, outbox: &mut Outbox) {
        let peers: Vec<pb::CachePeer> = self.caches.values().cloned().collect();
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        let Some(spread) = run.spread.as_mut() else {
            return;
        };
        let (query, prepare) = (spread.needs_query(), spread.needs_prepare());
        if query || prepare {
            // HB (query) or CON (prepare): every function placed first; its cache answers
            // what OPT would read, or a snapshot of its keys. Under CON nothing runs until
            // every snapshot is in; under HB OPT starts at once (below).
            for f in spread.functions().to_vec() {
                let keys = fn_keys(&run.msg, &f);
                let Some(host) = self.placement.place(&keys) else {
                    return;
                };
                let Some(out) = self.hosts.get(&host) else {
                    return;
                };
                spread.prepared(&f, &host);
                let (run_id, attempt, rdag) = (id, spread.attempt(), run.keys.clone());
                let msg = if query {
                    pb::from_scheduler::Msg::HbQuery(pb::HbQuery {
                        run_id,
                        attempt,
                        function: f.clone(),
                        keys,
                        rdag,
                    })
                } else {
                    pb::from_scheduler::Msg::ConPrepare(pb::ConPrepare {
                        run_id,
                        attempt,
                        function: f.clone(),
                        keys,
                        rdag,
                        timeout_ms: run.msg.timeout_ms,
                    })
                };
                outbox.push((out.clone(), pb::FromScheduler { msg: Some(msg) }));
            }
            if prepare {
                return;
            }
        }
        // HB after an OPT abort: functions whose OPT result stands are not run again, which
        // may make their downstream functions ready at once.
        let mut ready = spread.ready();
        loop {
            let mut reused = false;
            for f in &ready {
                if let Some(host) = spread.reuse(f) {
                    tracing::debug!(run = id, function = %f, "OPT result reused under CON");
                    self.placement.finished(&host);
                    reused = true;
                }
            }
            if !reused {
                break;
            }
            ready = spread.ready();
        }
        for f in ready {
            let keys = fn_keys(&run.msg, &f);
            // CON: where it was prepared (its cache pinned its snapshot).
            let host = match spread.host_of(&f) {
                Some(h) => Some(h.to_string()),
                None => self.placement.place(&keys),
            };
            let Some(host) = host else {
                return;
            };
            let Some(out) = self.hosts.get(&host) else {
                return;
            };
            let msg = spread.run_fn(&f, &run.msg, &run.keys, &peers);
            spread.placed(&f, &host);
            outbox.push((
                out.clone(),
                pb::FromScheduler {
                    msg: Some(pb::from_scheduler::Msg::RunFn(msg)),
                },
            ));
        }
    }

    /// Ends the current attempt of `spread`: its running functions stop counting as load,
    /// and every host of it releases its pins. The spread is ready for its next attempt.
    pub(super) fn end_attempt(&mut self, spread: &mut Spread, outbox: &mut Outbox) {
        let (attempt, hosts, running) = spread.restart();
        for h in running.values() {
            self.placement.finished(h);
        }
        for h in hosts {
            if let Some(out) = self.hosts.get(&h) {
                outbox.push((
                    out.clone(),
                    pb::FromScheduler {
                        msg: Some(pb::from_scheduler::Msg::Release(pb::ReleaseAttempt {
                            attempt,
                        })),
                    },
                ));
            }
        }
    }

    /// A host's answer for one function of spread run `id`.
    pub(super) fn fn_done(&mut self, host: &str, done: pb::FnDone, outbox: &mut Outbox) {
        let id = done.run_id;
        self.count_meta(id, done.meta.as_ref().map_or(0, Message::encoded_len));
        let Some(mut spread) = self.runs.get_mut(&id).and_then(|r| r.spread.take()) else {
            // The call ended while the function ran: what it pinned there is left over.
            self.release_at(host, done.attempt, outbox);
            return;
        };
        if done.attempt != spread.attempt() {
            // Its attempt ended while it ran (an abort, HB's early abort): the release was
            // sent before the function pinned its reads, so it is sent again.
            self.release_at(host, done.attempt, outbox);
        }
        let event = spread.done(host, done);
        if !matches!(event, Event::Stale) {
            self.placement.finished(host);
        }
        let restore = |st: &mut State, spread: Spread| {
            if let Some(run) = st.runs.get_mut(&id) {
                run.spread = Some(spread);
            }
        };
        match event {
            Event::Stale => restore(self, spread),
            Event::Progress => {
                restore(self, spread);
                self.dispatch_spread(id, outbox);
            }
            Event::Finished(v) => {
                restore(self, spread);
                self.finish(id, pb::client_response::Result::Value(v), outbox);
            }
            Event::Failed(e) => {
                restore(self, spread);
                self.finish(id, pb::client_response::Result::Error(e), outbox);
            }
            Event::Aborted(why) => self.abort_attempt(id, spread, &why, outbox),
        }
    }

    /// Sends `ReleaseAttempt` for `attempt` to `host` (releasing twice is harmless).
    fn release_at(&self, host: &str, attempt: u64, outbox: &mut Outbox) {
        if let Some(out) = self.hosts.get(host) {
            outbox.push((
                out.clone(),
                pb::FromScheduler {
                    msg: Some(pb::from_scheduler::Msg::Release(pb::ReleaseAttempt {
                        attempt,
                    })),
                },
            ));
        }
    }

    /// A cache's CON snapshot for one function of spread run `id`.
    pub(super) fn con_snapshot(&mut self, host: &str, snap: pb::ConSnapshot, outbox: &mut Outbox) {
        let id = snap.run_id;
        self.count_meta(id, snap.s.as_ref().map_or(0, Message::encoded_len));
        let Some(mut spread) = self.runs.get_mut(&id).and_then(|r| r.spread.take()) else {
            // The snapshot was pinned after the call ended.
            self.release_at(host, snap.attempt, outbox);
            return;
        };
        if snap.attempt != spread.attempt() {
            self.release_at(host, snap.attempt, outbox);
        }
        match spread.con_snapshot(host, snap) {
            ConEvent::Aborted(why) => self.abort_attempt(id, spread, &why, outbox),
            event => {
                if let Some(run) = self.runs.get_mut(&id) {
                    run.spread = Some(spread);
                }
                if event == ConEvent::Planned {
                    self.dispatch_spread(id, outbox);
                }
            }
        }
    }

    /// A cache's HB view for one function of spread run `id`.
    pub(super) fn hb_view(&mut self, host: &str, view: pb::HbView, outbox: &mut Outbox) {
        let id = view.run_id;
        let bytes = view.table.as_ref().map_or(0, Message::encoded_len)
            + view.keys.iter().map(Message::encoded_len).sum::<usize>();
        self.count_meta(id, bytes);
        let Some(mut spread) = self.runs.get_mut(&id).and_then(|r| r.spread.take()) else {
            return;
        };
        let event = spread.hb_view(host, view);
        if let HbEvent::EarlyAbort(why) = &event {
            // OPT's first functions may have run: the abort path releases their pins
            // everywhere and runs CON (which may reuse their results, `Spread::reuse`).
            if let Some(run) = self.runs.get_mut(&id) {
                run.stats.early_aborts += 1;
            }
            self.abort_attempt(id, spread, why, outbox);
            return;
        }
        if let HbEvent::TooLate(why) = &event {
            tracing::debug!(run = id, "simulated abort after the sink was sent: {why}");
        }
        if let Some(run) = self.runs.get_mut(&id) {
            run.spread = Some(spread);
        }
        if let HbEvent::Opt(prefetch) = event {
            self.prefetch(id, prefetch, outbox);
        }
    }

    /// HB's prefetch notices: each function's cache stages the keys it will read from
    /// the store while its upstream functions run.
    fn prefetch(&mut self, id: u64, notices: Vec<(String, cache::KeySet)>, outbox: &mut Outbox) {
        let Some(spread) = self.runs.get(&id).and_then(|r| r.spread.as_ref()) else {
            return;
        };
        for (f, keys) in notices {
            let Some(out) = spread.host_of(&f).and_then(|h| self.hosts.get(h)) else {
                continue;
            };
            let msg = pb::Prefetch {
                keys: keys
                    .iter()
                    .map(|k| bytes::Bytes::copy_from_slice(k))
                    .collect(),
            };
            outbox.push((
                out.clone(),
                pb::FromScheduler {
                    msg: Some(pb::from_scheduler::Msg::Prefetch(msg)),
                },
            ));
        }
    }

    /// Adds `bytes` of causal metadata received for run `id` to its stats.
    fn count_meta(&mut self, id: u64, bytes: usize) {
        if let Some(run) = self.runs.get_mut(&id) {
            run.stats.meta_bytes += bytes as u64;
        }
    }

    /// The current attempt of spread run `id` aborted: release it everywhere, then run the
    /// DAG again (an HB call: under CON, decision 5 of docs/serverless.md), or after
    /// [`MAX_OPT_ATTEMPTS`] under CT.
    fn abort_attempt(&mut self, id: u64, mut spread: Spread, why: &str, outbox: &mut Outbox) {
        tracing::debug!(
            run = id,
            attempt = spread.attempts(),
            "attempt aborted: {why}"
        );
        self.stats.aborts += 1;
        self.end_attempt(&mut spread, outbox);
        if let Some(run) = self.runs.get_mut(&id) {
            run.stats.aborts += 1;
            run.stats.attempts = spread.attempts();
        }
        if spread.is_hb() {
            spread.to_con();
        }
        if spread.attempts() <= MAX_OPT_ATTEMPTS {
            if let Some(run) = self.runs.get_mut(&id) {
                run.spread = Some(spread);
            }
            self.dispatch_spread(id, outbox);
        } else if let Some(run) = self.runs.get_mut(&id) {
            // Bounded retries, then CT on one host (which never aborts).
            tracing::info!(
                run = id,
                "{MAX_OPT_ATTEMPTS} attempts aborted; running the call with CT"
            );
            run.msg.protocol = pb::Protocol::Ct as i32;
            run.spread = None;
            // A run already admitted: not refused for a full queue.
            self.dispatch(id, usize::MAX, outbox);
        }
    }

    /// Host `host` is gone: every spread run with a function or pins there restarts
    /// (counted as a host failure, as for CT), or fails after too many.
    pub(super) fn host_lost_spread(&mut self, host: &str, max_attempts: u32, outbox: &mut Outbox) {
        let hit: Vec<u64> = self
            .runs
            .iter()
            .filter(|(_, r)| r.spread.as_ref().is_some_and(|s| s.hosts().contains(host)))
            .map(|(id, _)| *id)
            .collect();
        for id in hit {
            let Some(mut spread) = self.runs.get_mut(&id).and_then(|r| r.spread.take()) else {
                continue;
            };
            self.end_attempt(&mut spread, outbox);
            let Some(run) = self.runs.get_mut(&id) else {
                continue;
            };
            run.spread = Some(spread);
            run.failures += 1;
            if run.failures >= max_attempts {
                let failures = run.failures;
                self.finish(
                    id,
                    pb::client_response::Result::Error(pb_error(
                        pb::ErrorCode::Unavailable,
                        format!("{failures} compute hosts failed while running the call"),
                    )),
                    outbox,
                );
            } else {
                self.dispatch(id, usize::MAX, outbox);
            }
        }
    }
}
