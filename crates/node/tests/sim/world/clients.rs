//! The simulated clients: writes, reads, and the requests they wait for.
//!
//! A request a worker cannot answer at once ([`Submitted::Pending`]) is answered later by
//! an [`Effect::Complete`] of the same worker; that answer may even come *while* the
//! submission's effects are carried out (a send failing at once), before the client knows
//! its ticket, as in the real worker. Every ticket must be answered once: the final checks
//! fail on a request a live worker never answered (a client waiting forever) and on an
//! answer nobody asked for.

use super::*;

/// What a client waits for.
#[derive(Clone, Debug)]
pub(super) enum Asking {
    /// The outcome of a write.
    Write,
    /// A read of `key` (sent to `at`), which must not find the key absent if `must_exist`.
    Read {
        key: Bytes,
        at: Replica,
        must_exist: bool,
    },
}

/// A request waiting for its answer: (worker, its node's incarnation, ticket).
pub(super) type TicketKey = (Replica, u64, u64);

impl World {
    // ---- clients --------------------------------------------------------------------------

    pub(super) fn client_write(&mut self) {
        let ups: Vec<NodeKey> = self.up_nodes();
        if ups.is_empty() {
            return;
        }
        // The client learned the cluster from some node (its view may be stale).
        let view = self.nodes[&ups[self.rng.usize(..ups.len())]].view.clone();
        let k = self.rng.usize(..self.p.keys);
        let op = self.ops.make(&mut self.rng, k, self.p.delete_fraction);
        let ack = Ack {
            replicas: if self.rng.f64() < self.p.sync_fraction {
                2
            } else {
                1
            },
            durable: false,
            quiet: false,
        };
        self.client_send(&view, op, ack, Asking::Write);
    }

    /// A client reads a random key; if the run checks reads and the key was written (and
    /// stays live), the read must not answer that it is absent.
    pub(super) fn client_read(&mut self) {
        let ups: Vec<NodeKey> = self.up_nodes();
        if ups.is_empty() {
            return;
        }
        let view = self.nodes[&ups[self.rng.usize(..ups.len())]].view.clone();
        let k = self.rng.usize(..self.p.keys);
        let key = key_name(k);
        let must_exist =
            self.p.check_reads && stays_live(k) && self.writes.iter().any(|w| w.key == key);
        let op = Op::Get { key: key.clone() };
        let asking = Asking::Read {
            key,
            at: Replica { node: 0, worker: 0 },
            must_exist,
        };
        self.client_send(&view, op, Ack::default(), asking);
    }

    /// Sends a client op, learned the cluster from `view`: to the front port of one of its
    /// nodes (a worker there forwards what it does not hold), or to a replica's own port,
    /// following redirects a few times.
    fn client_send(&mut self, view: &ViewState, op: Op<Bytes>, ack: Ack, asking: Asking) {
        if self.rng.f64() < self.p.front_fraction {
            let mut nodes: Vec<NodeKey> = view.view.nodes().map(|(k, _)| *k).collect();
            nodes.sort();
            let nk = nodes[self.rng.usize(..nodes.len())];
            if !self.live(nk) {
                return;
            }
            let workers = self.nodes[&nk].workers.len();
            let w = Replica {
                node: nk,
                worker: self.rng.usize(..workers) as u32,
            };
            self.submit(w, op, ack, Routing::Forward, asking);
        } else {
            let replicas = view.replicas(op.key());
            if replicas.is_empty() {
                return;
            }
            let mut target = replicas[self.rng.usize(..replicas.len())];
            for _ in 0..3 {
                let live = self.nodes.get(&target.node).is_some_and(|n| {
                    n.status != Status::Down && n.workers.len() > target.worker as usize
                });
                if !live {
                    return;
                }
                match self.submit(target, op.clone(), ack, Routing::Redirect, asking.clone()) {
                    Some(redirect) if !redirect.is_empty() => {
                        target = redirect[self.rng.usize(..redirect.len())];
                    }
                    _ => return,
                }
            }
        }
    }

    /// Submits a client op to worker `w`; returns the replicas of a redirect.
    pub(super) fn submit(
        &mut self,
        w: Replica,
        op: Op<Bytes>,
        ack: Ack,
        routing: Routing,
        asking: Asking,
    ) -> Option<Vec<Replica>> {
        let key = op.key_bytes().clone();
        let inc = self.nodes.get(&w.node)?.inc;
        let asking = match asking {
            Asking::Read {
                key, must_exist, ..
            } => Asking::Read {
                key,
                at: w,
                must_exist,
            },
            write => write,
        };
        let submitted = self.with_core(w, Some(inc), |c| c.submit(vec![op], ack, routing))?;
        match submitted {
            Submitted::Done(results) => {
                if let Some(OpResult::Error(NodeError::Redirect(_))) = results.first() {
                    let view = self.nodes[&w.node].workers[w.worker as usize]
                        .core
                        .shard()
                        .view()
                        .clone();
                    return Some(view.serving_replicas(&key));
                }
                self.client_results(&asking, &results);
                None
            }
            Submitted::Pending(ticket) => {
                let t = (w, inc, ticket.0);
                // Answered while the submission's effects were carried out?
                match self.unclaimed.remove(&t) {
                    Some(results) => self.client_results(&asking, &results),
                    None => {
                        let (now, name) = (self.now, self.name(w));
                        self.trace.event(now, || {
                            format!("{name} ticket {}: {asking:?} waits", ticket.0)
                        });
                        self.waiting.insert(t, asking);
                    }
                }
                None
            }
        }
    }

    /// Worker `r` (of incarnation `inc`) completed the request with ticket `ticket`.
    pub(super) fn client_complete(
        &mut self,
        r: Replica,
        inc: u64,
        ticket: u64,
        results: Vec<OpResult>,
    ) {
        match self.waiting.remove(&(r, inc, ticket)) {
            Some(asking) => self.client_results(&asking, &results),
            None => {
                self.unclaimed.insert((r, inc, ticket), results);
            }
        }
    }

    /// The answer to a client's request.
    pub(super) fn client_results(&mut self, asking: &Asking, results: &[OpResult]) {
        for r in results {
            if !matches!(r, OpResult::Error(_)) {
                self.report.acked += 1;
            }
        }
        let Asking::Read {
            key,
            at,
            must_exist,
        } = asking
        else {
            return;
        };
        self.report.reads += 1;
        let found = matches!(results, [OpResult::Value(Some(_))]);
        let (now, name) = (self.now, self.name(*at));
        self.trace.event(now, || {
            format!(
                "read {} at {name}: {}",
                String::from_utf8_lossy(key),
                match results {
                    [OpResult::Value(Some(_))] => "found".to_string(),
                    [OpResult::Value(None)] => "not found".to_string(),
                    other => format!("{other:?}"),
                }
            )
        });
        // An error is an honest answer (a leaving node may stop before it answers a read
        // forwarded to it); absence is not.
        let absent = matches!(results, [OpResult::Value(None)]);
        self.report.read_errors += u64::from(!found && !absent);
        // Timed out: a worker it went through never answered (no crash, no loss: a leaving
        // node stopped with the request in progress).
        let timed_out = matches!(results, [OpResult::Error(NodeError::Unavailable(why))]
            if why.contains("did not answer in time"));
        self.report.read_timeouts += u64::from(timed_out);
        if *must_exist && absent {
            let what = format!(
                "a read of {} at {} answered {results:?}, but the key was written and never \
                 deleted",
                String::from_utf8_lossy(key),
                self.name(*at)
            );
            self.violations.push(what);
        }
    }

    /// Requests still waiting for a live worker's answer.
    fn still_waiting(&self) -> Option<(&TicketKey, &Asking)> {
        self.waiting.iter().find(|((r, inc, _), _)| {
            self.nodes
                .get(&r.node)
                .is_some_and(|n| n.inc == *inc && n.status != Status::Down)
        })
    }

    /// After quiescence: client requests a live worker never answered (given the time for
    /// every request in flight to time out), or answers nobody asked for.
    pub(super) fn unanswered(&mut self) -> Result<(), String> {
        let until = self.now + 10 * self.p.timeout_ms;
        while self.still_waiting().is_some() && self.now < until {
            self.run_until(self.now + 50)?;
        }
        if let Some(((r, _, t), _)) = self.unclaimed.iter().next() {
            return Err(format!(
                "{} answered ticket {t}, which no client was given",
                self.name(*r)
            ));
        }
        match self.still_waiting() {
            Some(((r, _, t), asking)) => Err(format!(
                "a client waits forever: {} never answered ticket {t} ({asking:?})",
                self.name(*r)
            )),
            None => Ok(()),
        }
    }
}
